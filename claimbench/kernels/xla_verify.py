"""Verify attention in XLA: every short chunk of a step at once, decode-style.

A speculative verify step gives each sequence a chunk of 1 + k tokens (its last token and k
draft tokens) after a cached prefix. The prefill path (xla_prefill.py) attends such chunks
one sequence at a time, each in a block of up to 256 query rows, nearly all of them masked:
measured on CPU at batch 32, k = 4, a verify step cost 7.1x a decode step with it (1.7x here).

Here every chunk of at most ``width`` tokens is one row of a batch, as decode_attention
attends its slots: the chunk's queries are gathered into [n, width] (rows past the chunk
masked), the sequences' pages are read a block at a time up to the longest context, and
each query sees the KV positions up to its own (the causal mask inside the chunk). Only the
chunk lengths are ragged, so the work follows n x width query rows, not n x 256.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import LayerKV, split_kv
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.online_softmax import MASK_VALUE, finish, online_step
from claimbench.kernels.paged_io import gather_sequences
from claimbench.kernels.xla_decode import DECODE_BLOCK_TOKENS

# The cache is read this many tokens at a time, as decode reads it (measured on CPU, k = 4,
# 133-token contexts: 128-token blocks took 5.8 / 9.8 / 19.7 ms at batch 1 / 8 / 32 against
# 3.5 / 7.5 / 21.6 ms for 32).
VERIFY_BLOCK_TOKENS = DECODE_BLOCK_TOKENS


def chunk_lens(md: AttentionMetadata) -> jax.Array:
    """i32[N] query tokens of each sequence after the decode group (prefill and mixed),
    0 for decode-only and padded slots."""
    seq = jnp.arange(md.kv_lens.shape[0])
    in_group = (seq >= md.distribution[0]) & (seq < md.num_seqs[0])
    return jnp.where(in_group, md.cu_q_lens[1:] - md.cu_q_lens[:-1], 0)


def takes_verify_path(md: AttentionMetadata, width: int) -> jax.Array:
    """b[]: every prefill or mixed chunk is at most ``width`` tokens, and there are at least
    two (one chunk alone is a single small block on the prefill path: measured on CPU at
    batch 1, 2.7 ms there against 3.5 ms here)."""
    lens = chunk_lens(md)
    return (jnp.max(lens) <= width) & (jnp.sum(lens > 0) > 1)


def verify_attention(
    qg: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    dtype,
    sm_scale: float,
    sliding_window: int | None,
    soft_cap: float | None,
    out: jax.Array,
    *,
    width: int,
) -> jax.Array:
    """The PrefillAttention contract (xla_rpa.py) for steps whose prefill and mixed chunks
    are all at most ``width`` tokens (the caller checks: a longer chunk's later rows would
    be left unattended).

    qg f[T, Hkv, G, D]; fills those sequences' rows of out f32[T, Hkv, G, D]."""
    num_tokens, num_kv_heads, group, head_dim = qg.shape
    page_size = cache.pages.shape[1]
    block_pages = max(1, VERIFY_BLOCK_TOKENS // page_size)
    block = block_pages * page_size
    q_lens = chunk_lens(md)  # [N]
    n = q_lens.shape[0]
    lens = jnp.where(q_lens > 0, md.kv_lens, 0)
    offsets = jnp.arange(width)
    rows = md.cu_q_lens[:-1, None] + offsets  # [N, W] each chunk's token rows
    live = offsets < q_lens[:, None]
    q_pos = lens[:, None] - q_lens[:, None] + offsets  # [N, W] each query's position
    # [N, W, Hkv, G, D] -> [N, Hkv, W * G, D]: a chunk's queries are one KV head's rows.
    q = qg[jnp.minimum(rows, num_tokens - 1)].transpose(0, 2, 1, 3, 4)
    q = q.reshape(n, num_kv_heads, width * group, head_dim)
    row_pos = jnp.repeat(q_pos, group, axis=1)  # [N, W * G]
    row_live = jnp.repeat(live, group, axis=1)
    table = md.page_indices
    table = jnp.pad(table, ((0, 0), (0, -table.shape[1] % block_pages)))  # null-page padding
    num_blocks = (jnp.max(lens) + block - 1) // block

    def body(carry):
        i, m, denom, acc = carry
        pages = jax.lax.dynamic_slice_in_dim(table, i * block_pages, block_pages, axis=1)
        keys, values = split_kv(gather_sequences(cache, pages, dtype))  # [N, block, Hkv, D]
        s = jnp.einsum("nhrd,nlhd->nhrl", q, keys, preferred_element_type=jnp.float32)
        s = s * sm_scale
        if soft_cap is not None:
            s = soft_cap * jnp.tanh(s / soft_cap)
        kv_pos = i * block + jnp.arange(block)
        mask = (kv_pos[None, None, :] <= row_pos[:, :, None]) & row_live[:, :, None]
        if sliding_window is not None:
            mask &= kv_pos[None, None, :] > row_pos[:, :, None] - sliding_window
        m, denom, acc = online_step(
            m,
            denom,
            acc,
            s,
            mask[:, None],
            lambda p: jnp.einsum("nhrl,nlhd->nhrd", p, values.astype(jnp.float32)),
        )
        return i + 1, m, denom, acc

    stats = (n, num_kv_heads, width * group)
    init = (
        jnp.int32(0),
        jnp.full(stats, MASK_VALUE, jnp.float32),
        jnp.zeros(stats, jnp.float32),
        jnp.zeros((*stats, head_dim), jnp.float32),
    )
    _, _, denom, acc = jax.lax.while_loop(lambda c: c[0] < num_blocks, body, init)
    result = finish(denom, acc).reshape(n, num_kv_heads, width, group, head_dim)
    result = result.transpose(0, 2, 1, 3, 4).reshape(n * width, num_kv_heads, group, head_dim)
    # Rows past a chunk go out of bounds and are dropped: they belong to other sequences.
    target = jnp.where(live, rows, num_tokens).reshape(-1)
    return out.at[target].set(result, mode="drop")
