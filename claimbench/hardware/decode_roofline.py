"""The bandwidth roofline of one of this engine's decode steps, from its own configuration.

A decode step of ``batch`` sequences must at least read every weight once and each sequence's
cached K/V, and write the new token's K/V; on a bandwidth-bound device it can take no less
than those bytes over the memory bandwidth. Its useful work is 2 FLOPs per active weight per
token plus attention's 4 FLOPs per cached token per query head dimension. Weights and KV are
counted in the dtypes the engine stores them in (float32 on a CPU run is 4 bytes a weight).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from claimbench.hardware.model_presets import ModelShape

WEIGHT_STORAGE_BYTES = {"int8": 1, "fp8": 1}  # else the compute dtype's width


def weight_storage_bytes(weights: str, dtype: str) -> int:
    """Bytes one weight takes: 1 for int8/fp8 weights, else the compute dtype's width."""
    return WEIGHT_STORAGE_BYTES.get(weights, np.dtype(dtype).itemsize)


@dataclass(frozen=True)
class DecodeBytes:
    """The least a decode step moves and the work it does."""

    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    flops: float

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes


def decode_bytes(
    model: ModelShape,
    *,
    batch: int,
    context: float,
    weight_bytes_per_param: int,
    kv_bytes_per_element: int,
) -> DecodeBytes:
    """One decode step of ``batch`` sequences each attending ``context`` cached tokens."""
    if batch < 1 or context < 1:
        raise ValueError(f"batch and context must be >= 1, got {batch}, {context}")
    kv_token = model.kv_elements_per_token * kv_bytes_per_element
    q_dims = model.num_heads * model.head_dim * model.num_layers
    return DecodeBytes(
        weight_bytes=float(model.num_params * weight_bytes_per_param),
        kv_read_bytes=float(batch * context * kv_token),
        kv_write_bytes=float(batch * kv_token),
        # QK^T and PV: 2 FLOPs each per cached token per query-head dimension.
        flops=float(batch * (2 * model.num_active_params + 4 * context * q_dims)),
    )
