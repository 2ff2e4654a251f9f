"""Pure-jnp ragged paged attention with the KV write: the XLA backend and the test reference.

The flattened step batch mixes decode tokens and prefill chunks of many
sequences (see ``metadata.AttentionMetadata``). K/V are gathered once per
sequence slot through its block table, never once per query token, so the
memory traffic is O(num_seqs * max_kv_len), not O(num_tokens * max_kv_len).

Decode-only sequences (the first ``distribution[0]`` slots, one token each)
are attended in one batched einsum: token t is sequence t. Prefill and mixed
sequences (few per step under a token budget) are attended one at a time in
a ``while_loop`` over just those slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    LayerKV,
    dequantize_rows,
    fp8_row_scales,
    interleave_kv,
    quantize_rows,
    split_kv,
)
from claimbench.kernels.metadata import AttentionMetadata

MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def write_kv(cache: LayerKV, k: jax.Array, v: jax.Array, slot_mapping: jax.Array) -> LayerKV:
    """Scatter the step's new K/V into the pages, quantizing to the page dtype.

    k, v: f[T, num_kv_heads, head_dim]; slot_mapping: i32[T] (page * page_size + offset).
    """
    pages = cache.pages
    num_pages, page_size, num_rows, head_dim = pages.shape
    stored, row_scales = quantize_rows(interleave_kv(k, v), cache.scales, pages.dtype)
    flat = pages.reshape(num_pages * page_size, num_rows, head_dim)
    pages = flat.at[slot_mapping].set(stored).reshape(pages.shape)
    scales = cache.scales
    if row_scales is not None:
        flat_scales = scales.reshape(num_pages * page_size, num_rows)
        scales = flat_scales.at[slot_mapping].set(row_scales).reshape(scales.shape)
    return LayerKV(pages, scales)


def gather_sequences(cache: LayerKV, page_indices: jax.Array, dtype) -> jax.Array:
    """Dequantized K/V rows of every sequence slot: f[N, pages_per_seq * page_size, 2H, D]."""
    num_seqs, pages_per_seq = page_indices.shape
    _, page_size, num_rows, head_dim = cache.pages.shape
    kv = cache.pages[page_indices].reshape(num_seqs, pages_per_seq * page_size, num_rows, head_dim)
    if cache.pages.dtype == jnp.int8:
        row_scales = cache.scales[page_indices].reshape(num_seqs, -1, num_rows)
    elif cache.pages.dtype == FP8_DTYPE:
        row_scales = fp8_row_scales(cache.scales, num_rows)
    else:
        row_scales = None
    return dequantize_rows(kv, row_scales, dtype)


def _scores(q: jax.Array, k: jax.Array, sm_scale: float, soft_cap: float | None) -> jax.Array:
    """q f[Tq, Hkv, G, D], k f[..., L, Hkv, D] -> f32[Tq, Hkv, G, L]."""
    s = jnp.einsum("thgd,lhd->thgl", q, k, preferred_element_type=jnp.float32) * sm_scale
    if soft_cap is not None:
        s = soft_cap * jnp.tanh(s / soft_cap)
    return s


def _softmax_av(s: jax.Array, mask: jax.Array, v: jax.Array) -> jax.Array:
    """Masked softmax in f32 then the value sum: f32[Tq, Hkv, G, L] x f[L, Hkv, D]."""
    s = jnp.where(mask, s, MASK_VALUE)
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = jnp.where(mask, p, 0.0)
    denom = jnp.maximum(jnp.sum(p, axis=-1, keepdims=True), 1e-30)
    return jnp.einsum("thgl,lhd->thgd", p / denom, v.astype(jnp.float32))


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
    """Write the new K/V, then attend every token over its own sequence's cache.

    q: f[T, num_q_heads, D]; k, v: f[T, num_kv_heads, D]; cache pages
    [num_pages, page_size, 2 * num_kv_heads, D]. Returns (f[T, num_q_heads, D], cache).
    Token t of sequence i sits at position kv_lens[i] - q_len_i + (t - cu_q_lens[i]) and
    attends to KV positions <= its own (and > position - sliding_window if set).
    """
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads={num_q_heads} not a multiple of num_kv_heads={num_kv_heads}")
    group = num_q_heads // num_kv_heads
    cache = write_kv(cache, k, v, md.slot_mapping)
    kv = gather_sequences(cache, md.page_indices, q.dtype)  # [N, L, 2H, D]
    keys, values = split_kv(kv)  # [N, L, H, D] each
    max_kv_len = kv.shape[1]
    kv_pos = jnp.arange(max_kv_len)
    qg = q.reshape(num_tokens, num_kv_heads, group, head_dim)

    # Decode-only slots: token t belongs to sequence t and sits at kv_lens[t] - 1.
    num_decode_slots = min(md.max_num_seqs, num_tokens)
    dec_lens = md.kv_lens[:num_decode_slots]
    s = jnp.einsum(
        "nhgd,nlhd->nhgl", qg[:num_decode_slots], keys[:num_decode_slots],
        preferred_element_type=jnp.float32,
    ) * sm_scale
    if soft_cap is not None:
        s = soft_cap * jnp.tanh(s / soft_cap)
    dec_mask = kv_pos[None, :] < dec_lens[:, None]
    if sliding_window is not None:
        dec_mask &= kv_pos[None, :] >= dec_lens[:, None] - sliding_window
    dec_mask = dec_mask[:, None, None, :]
    s = jnp.where(dec_mask, s, MASK_VALUE)
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = jnp.where(dec_mask, p, 0.0)
    p = p / jnp.maximum(jnp.sum(p, axis=-1, keepdims=True), 1e-30)
    dec_out = jnp.einsum("nhgl,nlhd->nhgd", p, values[:num_decode_slots].astype(jnp.float32))
    is_decode = jnp.arange(num_tokens) < md.distribution[0]
    out = jnp.zeros((num_tokens, num_kv_heads, group, head_dim), jnp.float32)
    out = out.at[:num_decode_slots].set(dec_out)
    out = jnp.where(is_decode[:, None, None, None], out, 0.0)

    # Prefill-only and mixed slots: one sequence per iteration, all tokens masked to it.
    token_idx = jnp.arange(num_tokens)

    def body(i, acc):
        start, end = md.cu_q_lens[i], md.cu_q_lens[i + 1]
        q_pos = md.kv_lens[i] - (end - start) + (token_idx - start)  # [T]
        in_seq = (token_idx >= start) & (token_idx < end)
        mask = kv_pos[None, :] <= q_pos[:, None]
        if sliding_window is not None:
            mask &= kv_pos[None, :] > q_pos[:, None] - sliding_window
        mask &= in_seq[:, None]
        seq_out = _softmax_av(
            _scores(qg, keys[i], sm_scale, soft_cap), mask[:, None, None, :], values[i]
        )
        return jnp.where(in_seq[:, None, None, None], seq_out, acc)

    out = jax.lax.fori_loop(md.distribution[0], md.num_seqs[0], body, out)
    return out.reshape(num_tokens, num_q_heads, head_dim).astype(q.dtype), cache


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
