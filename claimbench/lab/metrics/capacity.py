"""Capacity arithmetic with the engine's own byte layout, for any model layout.

The KV side runs the functions the engine sizes its real pool with (engine/kv/kv_cache.py:
bytes per token with int8's per-row scales, fp8's per-layer tensor scales outside the pages,
whole pages, the null page) on a model's config, so a claim about Llama-3.1-8B is computed
for Llama-3.1-8B's layout, not for whatever small model this machine serves. The weight side
is models/quantize.py's layout: every matrix in one byte per value plus one f32 scale per
output channel (the embedding table: per vocab row), norms and biases in the model dtype.

These are exact arithmetic: experiments record them once as analytic evidence, with
``inputs()`` as the inputs of the formula. Tests check both against what a real engine
allocates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import jax.numpy as jnp

from claimbench.engine.kv.kv_cache import (
    SCALE_BYTES,
    kv_bytes_per_page,
    kv_bytes_per_token,
    kv_fixed_bytes,
    max_concurrent_sequences,
    num_pages_for_pool,
    resolve_kv_dtype,
)
from claimbench.hardware.model_presets import ModelShape
from claimbench.models.config import ModelConfig

DTYPE_BYTES = 2  # the claims' baseline: weights and activations in bfloat16
WEIGHT_FORMATS = ("bf16", "int8", "fp8")  # bf16: unquantized


@dataclass(frozen=True)
class PoolCapacity:
    """How many ``seq_len``-token sequences a ``pool_bytes`` KV pool in ``kv_dtype`` holds."""

    kv_dtype: str  # bf16 | int8 | fp8
    page_size: int  # tokens per page
    pool_bytes: int  # the KV budget: pages, scales and the null page
    seq_len: int  # tokens per sequence
    bytes_per_token: int  # K and V over all layers, int8 scales included
    page_bytes: int  # page_size * bytes_per_token
    fixed_bytes: int  # outside the pages: fp8's per-layer (k_scale, v_scale)
    num_pages: int  # whole pages in the pool, the null page included
    num_seqs: int  # sequences whose every page fits at once

    def inputs(self) -> dict[str, Any]:
        """Every term of the count, for the analytic record."""
        return asdict(self)


def pool_capacity(
    cfg: ModelConfig, kv_dtype: str, *, page_size: int, pool_bytes: int, seq_len: int
) -> PoolCapacity:
    """The engine's pool arithmetic for ``cfg`` in ``kv_dtype`` (bf16 | int8 | fp8)."""
    storage = resolve_kv_dtype(kv_dtype, "bfloat16")
    per_token = kv_bytes_per_token(cfg, storage)
    num_pages = num_pages_for_pool(cfg, storage, page_size, pool_bytes)
    return PoolCapacity(
        kv_dtype=kv_dtype,
        page_size=page_size,
        pool_bytes=pool_bytes,
        seq_len=seq_len,
        bytes_per_token=per_token,
        page_bytes=kv_bytes_per_page(cfg, storage, page_size),
        fixed_bytes=kv_fixed_bytes(cfg, storage),
        num_pages=num_pages,
        num_seqs=max_concurrent_sequences(num_pages - 1, page_size, seq_len),
    )


def _matrices(shape: ModelShape) -> list[tuple[int, int]]:
    """(rows, output channels) of every matrix: per layer q, k, v, o, gate, up, down; the
    embedding table (a channel per vocab row); an untied head [hidden, vocab]."""
    h, q_dim = shape.hidden_size, shape.num_heads * shape.head_dim
    kv_dim, inner = shape.num_kv_heads * shape.head_dim, shape.intermediate_size
    layer = [(h, q_dim), (h, kv_dim), (h, kv_dim), (q_dim, h), (h, inner), (h, inner), (inner, h)]
    head = [] if shape.tie_word_embeddings else [(h, shape.vocab_size)]
    return layer * shape.num_layers + [(h, shape.vocab_size)] + head


def weight_layout_bytes(shape: ModelShape, weights: str) -> int:
    """Bytes of ``shape``'s weights in ``weights`` format as the engine holds them."""
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights {weights!r} is not one of {WEIGHT_FORMATS}")
    if shape.num_experts > 1:
        raise ValueError(f"{shape.name}: the engine's weight layout covers dense models only")
    matrices = _matrices(shape)
    matrix_params = sum(rows * cols for rows, cols in matrices)
    if weights == "bf16":
        return DTYPE_BYTES * shape.num_params
    # Everything that is not a matrix (norms, biases) stays in the model dtype.
    vectors = shape.num_params - matrix_params
    scales = sum(cols for _, cols in matrices)
    return (
        matrix_params * jnp.dtype(jnp.int8).itemsize
        + scales * SCALE_BYTES
        + (vectors * DTYPE_BYTES)
    )


def layout_inputs(cfg: ModelConfig | ModelShape) -> dict[str, int]:
    """The KV layout terms of a model, for an analytic record's inputs."""
    return {
        "num_layers": cfg.num_layers,
        "num_kv_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
    }
