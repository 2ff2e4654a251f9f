"""Decode attention in XLA: one query per decode-only slot, by online softmax over blocks.

The portable path (any XLA backend). Slots are attended together, token t being
sequence t, a block of pages at a time up to the longest decode context, so the work
follows the real lengths rather than pages_per_seq and no [n, max_len, 2H, D] copy of
the cache is made. On CPU the gathers and the transposes the batched dots need cost
more than the arithmetic; kernels/native_attention.py reads pages in place instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import LayerKV, split_kv
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.online_softmax import MASK_VALUE, finish, online_step
from claimbench.kernels.paged_io import decode_lens, gather_sequences

# The cache is read this many tokens at a time (small blocks stay in cache; measured
# on CPU, 32 beat 16, 64 and 128).
DECODE_BLOCK_TOKENS = 32


def decode_attention(
    qg: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    dtype,
    sm_scale: float,
    sliding_window: int | None,
    soft_cap: float | None,
) -> jax.Array:
    """qg f[n, Hkv, G, D] for slots 0..n-1 -> f32[n, Hkv, G, D] (zeros past the decode group)."""
    n = qg.shape[0]
    page_size = cache.pages.shape[1]
    block_pages = max(1, DECODE_BLOCK_TOKENS // page_size)
    block = block_pages * page_size
    lens = decode_lens(md, n)
    table = md.page_indices[:n]
    pad = -table.shape[1] % block_pages
    table = jnp.pad(table, ((0, 0), (0, pad)))  # padding points at the null page
    num_blocks = (jnp.max(lens) + block - 1) // block

    def body(carry):
        i, m, denom, acc = carry
        pages = jax.lax.dynamic_slice_in_dim(table, i * block_pages, block_pages, axis=1)
        keys, values = split_kv(gather_sequences(cache, pages, dtype))  # [n, block, H, D]
        s = jnp.einsum("nhgd,nlhd->nhgl", qg, keys, preferred_element_type=jnp.float32)
        s = s * sm_scale
        if soft_cap is not None:
            s = soft_cap * jnp.tanh(s / soft_cap)
        kv_pos = i * block + jnp.arange(block)
        mask = kv_pos[None, :] < lens[:, None]
        if sliding_window is not None:
            mask &= kv_pos[None, :] >= lens[:, None] - sliding_window
        m, denom, acc = online_step(
            m,
            denom,
            acc,
            s,
            mask[:, None, None, :],
            lambda p: jnp.einsum("nhgl,nlhd->nhgd", p, values.astype(jnp.float32)),
        )
        return i + 1, m, denom, acc

    stats = qg.shape[:3]
    init = (
        jnp.int32(0),
        jnp.full(stats, MASK_VALUE, jnp.float32),
        jnp.zeros(stats, jnp.float32),
        jnp.zeros(qg.shape, jnp.float32),
    )
    _, _, denom, acc = jax.lax.while_loop(lambda c: c[0] < num_blocks, body, init)
    return finish(denom, acc)
