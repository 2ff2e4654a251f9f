"""Pure-jnp ragged paged attention with the KV write: the XLA backend and the test reference.

The flattened step batch mixes decode tokens and prefill chunks of many
sequences (see ``metadata.AttentionMetadata``). K/V are gathered once per
sequence slot through its block table, never once per query token, so the
memory traffic is O(num_seqs * max_kv_len), not O(num_tokens * max_kv_len).

Decode-only sequences (the first ``distribution[0]`` slots, one token each)
are attended together, token t being sequence t, by an online softmax over
blocks of pages up to the longest decode context: the work follows the real
lengths, not pages_per_seq. Prefill and mixed sequences (few per step under a
token budget) are attended one at a time in a loop over just those slots, a
block of their own query rows at a time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    LayerKV,
    dequantize_rows,
    fp8_row_scales,
    from_container,
    interleave_kv,
    logical_dtype,
    quantize_rows,
    split_kv,
    to_container,
)
from claimbench.kernels.metadata import AttentionMetadata

MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
# Decode attention reads the cache this many tokens at a time (small blocks stay in cache).
DECODE_BLOCK_TOKENS = 64
# Prefill chunks are attended this many query rows at a time.
PREFILL_BLOCK_TOKENS = 64


def write_kv(cache: LayerKV, k: jax.Array, v: jax.Array, slot_mapping: jax.Array) -> LayerKV:
    """Scatter the step's new K/V into the pages, quantizing to the page dtype.

    k, v: f[T, num_kv_heads, head_dim]; slot_mapping: i32[T] (page * page_size + offset).
    """
    pages = cache.pages
    num_pages, page_size, num_rows, head_dim = pages.shape
    stored, row_scales = quantize_rows(
        interleave_kv(k, v), cache.scales, logical_dtype(pages.dtype)
    )
    flat = pages.reshape(num_pages * page_size, num_rows, head_dim)
    pages = flat.at[slot_mapping].set(to_container(stored, pages.dtype)).reshape(pages.shape)
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
    kv = from_container(kv)
    if kv.dtype == jnp.int8:
        row_scales = cache.scales[page_indices].reshape(num_seqs, -1, num_rows)
    elif kv.dtype == FP8_DTYPE:
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


def _decode_attention(
    qg: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    dtype,
    sm_scale: float,
    sliding_window: int | None,
    soft_cap: float | None,
) -> jax.Array:
    """One query per decode-only slot, by online softmax over blocks of pages.

    qg: f[n, Hkv, G, D] for slots 0..n-1 (slots past distribution[0] get zeros).
    Returns f32[n, Hkv, G, D]. Only blocks below the longest decode kv_len are read, and
    one block at a time, so the work follows the real context lengths rather than
    pages_per_seq, and no [n, max_len, 2H, D] copy of the cache is ever materialized.
    """
    n = qg.shape[0]
    page_size = cache.pages.shape[1]
    block_pages = max(1, DECODE_BLOCK_TOKENS // page_size)
    block = block_pages * page_size
    lens = jnp.where(jnp.arange(n) < md.distribution[0], md.kv_lens[:n], 0)
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
        mask = mask[:, None, None, :]
        s = jnp.where(mask, s, MASK_VALUE)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        p = jnp.where(mask, jnp.exp(s - m_new[..., None]), 0.0)
        rescale = jnp.exp(m - m_new)
        denom = denom * rescale + jnp.sum(p, axis=-1)
        pv = jnp.einsum("nhgl,nlhd->nhgd", p, values.astype(jnp.float32))
        return i + 1, m_new, denom, acc * rescale[..., None] + pv

    stats = qg.shape[:3]
    init = (
        jnp.int32(0),
        jnp.full(stats, MASK_VALUE, jnp.float32),
        jnp.zeros(stats, jnp.float32),
        jnp.zeros(qg.shape, jnp.float32),
    )
    _, _, denom, acc = jax.lax.while_loop(lambda c: c[0] < num_blocks, body, init)
    return acc / jnp.maximum(denom, 1e-30)[..., None]


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
    kv_pos = jnp.arange(md.pages_per_seq * cache.pages.shape[1])
    qg = q.reshape(num_tokens, num_kv_heads, group, head_dim)

    # Decode-only slots: token t belongs to sequence t and sits at kv_lens[t] - 1.
    num_decode_slots = min(md.max_num_seqs, num_tokens)
    dec_out = _decode_attention(
        qg[:num_decode_slots], cache, md, q.dtype, sm_scale, sliding_window, soft_cap
    )
    is_decode = jnp.arange(num_tokens) < md.distribution[0]
    out = jnp.zeros((num_tokens, num_kv_heads, group, head_dim), jnp.float32)
    out = out.at[:num_decode_slots].set(dec_out)
    out = jnp.where(is_decode[:, None, None, None], out, 0.0)

    # Prefill-only and mixed slots (few per step): one sequence per iteration, gathering
    # just its pages, its query rows taken a block at a time, so the work follows the
    # sequence's own chunk rather than the whole padded step.
    q_block = min(PREFILL_BLOCK_TOKENS, num_tokens)
    row_offsets = jnp.arange(q_block)

    def body(i, acc):
        table = jax.lax.dynamic_slice_in_dim(md.page_indices, i, 1, axis=0)
        keys, values = split_kv(gather_sequences(cache, table, q.dtype)[0])  # [L, H, D]
        start, end = md.cu_q_lens[i], md.cu_q_lens[i + 1]

        def block(j, acc):
            # dynamic_slice clamps a window that would run past the end back inside the
            # array; rows are recomputed from the clamped start and masked to the sequence.
            first = jnp.minimum(start + j * q_block, num_tokens - q_block)
            rows = first + row_offsets
            q_pos = md.kv_lens[i] - (end - start) + (rows - start)  # [q_block]
            in_seq = (rows >= start) & (rows < end)
            mask = kv_pos[None, :] <= q_pos[:, None]
            if sliding_window is not None:
                mask &= kv_pos[None, :] > q_pos[:, None] - sliding_window
            mask &= in_seq[:, None]
            q_rows = jax.lax.dynamic_slice_in_dim(qg, first, q_block)
            seq_out = _softmax_av(
                _scores(q_rows, keys, sm_scale, soft_cap), mask[:, None, None, :], values
            )
            current = jax.lax.dynamic_slice_in_dim(acc, first, q_block)
            seq_out = jnp.where(in_seq[:, None, None, None], seq_out, current)
            return jax.lax.dynamic_update_slice_in_dim(acc, seq_out, first, axis=0)

        num_blocks = (end - start + q_block - 1) // q_block
        return jax.lax.fori_loop(0, num_blocks, block, acc)

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
