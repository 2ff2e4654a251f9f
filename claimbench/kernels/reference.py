"""The naive paged reference every attention backend is tested against, and dense attention.

``ragged_paged_attention`` computes what the backends compute (xla_rpa.py, the native
kernels behind it, the Pallas kernel in pallas_rpa.py), in the plainest way: write the
step's K/V into the pages, gather each sequence's whole cache through its block table,
and give every token ordinary dense attention over its own sequence's keys, masked to the
positions it may see. No blocks, no online softmax, a [T, max_len] score matrix: slow and
memory-hungry by design, and easy to read.

``dense_causal_attention`` is naive attention on unpaged K/V (training, and the tests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import LayerKV, split_kv
from claimbench.kernels.metadata import (
    AttentionMetadata,
    check_inputs,
    check_metadata_values,
    is_concrete,
)
from claimbench.kernels.online_softmax import MASK_VALUE
from claimbench.kernels.paged_io import gather_sequences, write_kv

__all__ = [
    "MASK_VALUE",
    "dense_causal_attention",
    "gather_sequences",
    "ragged_paged_attention",
    "token_positions",
    "write_kv",
]


def token_positions(md: AttentionMetadata, num_tokens: int):
    """(sequence i32[T], position i32[T], real b[T]) of every token of the flat batch.

    Token t of sequence i (cu_q_lens[i] <= t < cu_q_lens[i + 1]) sits at position
    kv_lens[i] - q_len_i + (t - cu_q_lens[i]); tokens past cu_q_lens[num_seqs] are padding.
    """
    token = jnp.arange(num_tokens)
    seq = jnp.searchsorted(md.cu_q_lens, token, side="right") - 1
    seq = jnp.clip(seq, 0, md.max_num_seqs - 1)
    start, end = md.cu_q_lens[seq], md.cu_q_lens[seq + 1]
    position = md.kv_lens[seq] - (end - start) + (token - start)
    real = token < md.cu_q_lens[md.num_seqs[0]]
    return seq, position, real


def ragged_paged_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    *,
    sm_scale: float,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
) -> tuple[jax.Array, LayerKV]:
    """The backends' contract, naively: q f[T, Hq, D], k and v f[T, Hkv, D], cache pages
    [num_pages, page_size, 2 * Hkv, D] -> (f[T, Hq, D], cache with the new K/V written).

    Each token attends to its sequence's positions <= its own (and > position -
    sliding_window if set), logits ``soft_cap * tanh(s / soft_cap)`` if soft_cap is set;
    rows of tokens that belong to no sequence are zero.
    """
    check_inputs(
        q, k, v, cache, md, sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap
    )
    num_tokens = q.shape[0]
    if is_concrete(md):
        num_pages, page_size = cache.pages.shape[:2]
        check_metadata_values(md, num_tokens=num_tokens, num_pages=num_pages, page_size=page_size)
    cache = write_kv(cache, k, v, md.slot_mapping)
    keys, values = split_kv(gather_sequences(cache, md.page_indices, q.dtype))  # [N, L, H, D]
    seq, position, real = token_positions(md, num_tokens)
    kv_pos = jnp.arange(keys.shape[1])
    visible = (kv_pos[None, :] <= position[:, None]) & real[:, None]
    if sliding_window is not None:
        visible &= kv_pos[None, :] > position[:, None] - sliding_window
    # Each token is a batch of one query over its own sequence's keys; the mask carries
    # its position, so the query sits at the last key as dense attention places it.
    out = dense_causal_attention(
        q[:, None], keys[seq], values[seq], sm_scale=sm_scale, soft_cap=soft_cap, kv_valid=visible
    )[:, 0]
    return jnp.where(real[:, None, None], out, 0).astype(q.dtype), cache


def dense_causal_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    sm_scale: float,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    kv_valid: jax.Array | None = None,
) -> jax.Array:
    """Naive dense attention: q f[B, Sq, Hq, D], k/v f[B, L, Hkv, D] -> f[B, Sq, Hq, D].

    Query i sits at position L - Sq + i (so Sq == L is ordinary causal self-attention).
    ``kv_valid`` b[B, L] masks padding keys. Softmax in f32; used for training and tests.
    """
    batch, q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    group = num_q_heads // num_kv_heads
    qg = q.reshape(batch, q_len, num_kv_heads, group, head_dim)
    s = jnp.einsum("bqhgd,blhd->bhgql", qg, k, preferred_element_type=jnp.float32) * sm_scale
    if soft_cap is not None:
        s = soft_cap * jnp.tanh(s / soft_cap)
    q_pos = kv_len - q_len + jnp.arange(q_len)
    kv_pos = jnp.arange(kv_len)
    mask = kv_pos[None, :] <= q_pos[:, None]
    if sliding_window is not None:
        mask &= kv_pos[None, :] > q_pos[:, None] - sliding_window
    mask = mask[None, None, None]
    if kv_valid is not None:
        mask = mask & kv_valid[:, None, None, None, :]
    s = jnp.where(mask, s, MASK_VALUE)
    p = jax.nn.softmax(s, axis=-1)
    out = jnp.einsum("bhgql,blhd->bqhgd", p, v.astype(jnp.float32))
    return out.reshape(batch, q_len, num_q_heads, head_dim).astype(q.dtype)
