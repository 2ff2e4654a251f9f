"""Default block sizes of the ragged paged attention kernel, per TPU generation.

A KV block should be long enough that its DMA (``bkv * 2 * num_kv_heads * head_dim``
elements) dwarfs the fixed cost of a loop step and a DMA issue, and short enough that two
of them, the q/out buffers and the f32 accumulators stay well inside the default scoped
VMEM (16 MiB on v5e, more on later chips). Chips that stream HBM faster want longer blocks
to stay bandwidth-bound. A query block of ``bq`` tokens makes a [bq * group, bkv] score
tile per KV head; prefill is MXU-bound once that tile is a few hundred rows.

These are starting points scaled by each chip's HBM bandwidth, not tuned measurements;
the benchmark (benchmarks/attention_kernel.py) is where to tune them.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax


@dataclass(frozen=True)
class BlockSizes:
    kv_tokens: int  # target KV tokens per block (rounded down to whole pages)
    q_tokens: int  # query tokens per block in the prefill/mixed path

    def __post_init__(self) -> None:
        if self.kv_tokens < 1 or self.q_tokens < 1:
            raise ValueError(f"block sizes must be >= 1, got {self.kv_tokens}, {self.q_tokens}")


BLOCK_SIZES: dict[str, BlockSizes] = {
    "v4": BlockSizes(kv_tokens=128, q_tokens=32),
    "v5e": BlockSizes(kv_tokens=256, q_tokens=32),
    "v5p": BlockSizes(kv_tokens=256, q_tokens=64),
    "v6e": BlockSizes(kv_tokens=512, q_tokens=64),
    "v7": BlockSizes(kv_tokens=512, q_tokens=64),
}
# Off TPU (interpret mode) and on unknown chips: small blocks, so tests cross many blocks.
FALLBACK = BlockSizes(kv_tokens=128, q_tokens=32)

_DEVICE_KINDS = {
    "TPU v4": "v4",
    "TPU v5e": "v5e",
    "TPU v5 lite": "v5e",
    "TPU v5": "v5p",
    "TPU v5p": "v5p",
    "TPU v6e": "v6e",
    "TPU v6 lite": "v6e",
    "TPU7x": "v7",
}


def chip_generation() -> str | None:
    """The running TPU's generation ("v5e", "v6e", ...), None off TPU or if unrecognised."""
    if jax.default_backend() != "tpu":
        return None
    return _DEVICE_KINDS.get(jax.devices()[0].device_kind)


def default_block_sizes(generation: str | None) -> BlockSizes:
    """The block sizes for a TPU generation (``chip_generation()``), or the fallback."""
    return BLOCK_SIZES.get(generation, FALLBACK) if generation else FALLBACK
