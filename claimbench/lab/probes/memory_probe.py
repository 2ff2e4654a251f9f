"""What this host's device actually sustains: streaming memory bandwidth and dense matmul rate.

A chip spec gives a TPU's or GPU's roofline; a CPU has none worth quoting (caches, NUMA, turbo),
so the decode roofline on a CPU is drawn from these measurements instead. Both run on JAX's
default device, so on an accelerator they show what its spec promises against what it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp


def _best_s(fn: Callable[[], jax.Array], repeats: int) -> float:
    jax.block_until_ready(fn())  # compile and touch the buffers, untimed
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def stream_bytes_per_s(num_bytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Bytes per second of ``y = x + 1`` over an f32 array of ``num_bytes``: read once, written
    once (2 x num_bytes moved), best of ``repeats``. The array is far larger than any cache, so
    this is the memory system's streaming rate, not a cache's."""
    if num_bytes < 2**20 or repeats < 1:
        raise ValueError(f"num_bytes must be >= 1 MiB and repeats >= 1, got {num_bytes}, {repeats}")
    x = jnp.zeros((num_bytes // 4,), jnp.float32)
    step = jax.jit(lambda a: a + 1.0)
    return 2 * x.size * 4 / _best_s(lambda: step(x), repeats)


def matmul_flops_per_s(n: int = 1024, dtype: str = "float32", repeats: int = 5) -> float:
    """FLOP/s of one [n, n] x [n, n] matmul in ``dtype`` (2 n^3 FLOPs), best of ``repeats``."""
    if n < 64 or repeats < 1:
        raise ValueError(f"n must be >= 64 and repeats >= 1, got {n}, {repeats}")
    a = jnp.ones((n, n), dtype)
    b = jnp.ones((n, n), dtype)
    step = jax.jit(jnp.matmul)
    return 2 * n**3 / _best_s(lambda: step(a, b), repeats)
