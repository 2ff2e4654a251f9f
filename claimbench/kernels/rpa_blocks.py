"""Default block sizes of the ragged paged attention kernel, per TPU generation.

A KV block should be long enough that its DMA (``bkv * 2 * num_kv_heads * head_dim``
bytes) dwarfs the fixed cost of a grid step and a DMA issue, and short enough that two of
them plus the q/out buffers and the f32 accumulators sit well inside scoped VMEM. Newer
chips stream HBM faster, so they want longer blocks to stay bandwidth-bound. A query block
of ``bq`` tokens makes a [bq * group, bkv] score tile per KV head; prefill is MXU-bound
once that tile is a few hundred rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax


@dataclass(frozen=True)
class BlockSizes:
    kv_tokens: int  # target KV tokens per block (rounded to whole pages)
    q_tokens: int  # query tokens per block in the prefill/mixed path
    vmem_limit_bytes: int | None  # None: the compiler's default scoped VMEM

    def __post_init__(self) -> None:
        if self.kv_tokens < 1 or self.q_tokens < 1:
            raise ValueError(f"block sizes must be >= 1, got {self.kv_tokens}, {self.q_tokens}")


# Keyed by TPU generation; 16 MiB of scoped VMEM is the smallest default (v5e),
# v6e and v7 have 128 MiB / 64 MiB of physical VMEM, so they get a raised limit.
_MIB = 2**20
BLOCK_SIZES: dict[str, BlockSizes] = {
    "v4": BlockSizes(kv_tokens=128, q_tokens=32, vmem_limit_bytes=None),
    "v5e": BlockSizes(kv_tokens=256, q_tokens=32, vmem_limit_bytes=None),
    "v5p": BlockSizes(kv_tokens=256, q_tokens=64, vmem_limit_bytes=64 * _MIB),
    "v6e": BlockSizes(kv_tokens=512, q_tokens=64, vmem_limit_bytes=64 * _MIB),
    "7x": BlockSizes(kv_tokens=512, q_tokens=64, vmem_limit_bytes=48 * _MIB),
}
# Off TPU (interpret mode) and on unknown chips: small blocks, so tests exercise many blocks.
FALLBACK = BlockSizes(kv_tokens=128, q_tokens=32, vmem_limit_bytes=None)


_DEVICE_KINDS = {
    "TPU v4": "v4",
    "TPU v5e": "v5e",
    "TPU v5 lite": "v5e",
    "TPU v5": "v5p",
    "TPU v5p": "v5p",
    "TPU v6e": "v6e",
    "TPU v6 lite": "v6e",
    "TPU7x": "7x",
}


def chip_generation() -> str | None:
    """The running TPU's generation ("v5e", "v6e", ...), None off TPU or if unrecognised."""
    if jax.default_backend() != "tpu":
        return None
    return _DEVICE_KINDS.get(jax.devices()[0].device_kind)


def default_block_sizes(generation: str | None) -> BlockSizes:
    """The block sizes for a TPU generation (``chip_generation()``), or the fallback."""
    return BLOCK_SIZES.get(generation, FALLBACK) if generation else FALLBACK
