"""Prefill and mixed attention in XLA: flash-style over query blocks and causal KV blocks.

The sequences after the decode group (prefill-only chunks and chunks continuing a cached
prefix; few per step under a token budget) are attended one at a time. For each block of
a sequence's query rows, KV blocks are read from the sequence's pages, which already hold
this step's tokens, only up to the block's last position (and from its sliding window's
start), with an online softmax across them. So the work follows the causal triangle of
the real chunk, not pages_per_seq, and each product is a plain 2-D matmul per KV head.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.online_softmax import MASK_VALUE, finish, online_step
from claimbench.kernels.paged_io import gather_sequences

# Query rows and KV tokens per block. On CPU, 256 x 256 beat 128 x 128, 256 x 128, 128 x 256
# and 512 x 128 for one 512-token prompt and for 2048-token steps; 128 x 128 won only for
# four 128-token chunks.
PREFILL_BLOCK_TOKENS = 256
PREFILL_KV_BLOCK_TOKENS = 256


def prefill_attention(
    qg: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    dtype,
    sm_scale: float,
    sliding_window: int | None,
    soft_cap: float | None,
    out: jax.Array,
) -> jax.Array:
    """qg f[T, Hkv, G, D]; fills the prefill and mixed sequences' rows of out f32[T, Hkv, G, D]."""
    num_tokens, num_kv_heads, group, head_dim = qg.shape
    page_size = cache.pages.shape[1]
    q_block = min(PREFILL_BLOCK_TOKENS, num_tokens)
    kv_pages = max(1, PREFILL_KV_BLOCK_TOKENS // page_size)
    kv_block = kv_pages * page_size
    tables = jnp.pad(md.page_indices, ((0, 0), (0, -md.page_indices.shape[1] % kv_pages)))
    row_offsets = jnp.arange(q_block)
    rows_per_head = q_block * group  # query rows of one KV head: (token, group member)

    def sequence(i, out):
        start, end = md.cu_q_lens[i], md.cu_q_lens[i + 1]
        kv_len = md.kv_lens[i]
        table = tables[i]

        def query_block(j, out):
            # dynamic_slice clamps a window that would run past the end back inside the
            # array; rows are recomputed from the clamped start and masked to the sequence.
            first = jnp.minimum(start + j * q_block, num_tokens - q_block)
            rows = first + row_offsets
            in_seq = (rows >= start) & (rows < end)
            q_pos = kv_len - (end - start) + (rows - start)
            q_rows = jax.lax.dynamic_slice_in_dim(qg, first, q_block)  # [QB, Hkv, G, D]
            heads = [q_rows[:, h].reshape(rows_per_head, head_dim) for h in range(num_kv_heads)]
            row_pos = jnp.repeat(q_pos, group)
            row_live = jnp.repeat(in_seq, group)
            last = jnp.max(jnp.where(in_seq, q_pos, 0))
            first_kv = 0
            if sliding_window is not None:
                lowest = jnp.min(jnp.where(in_seq, q_pos, last)) - sliding_window + 1
                first_kv = jnp.maximum(lowest, 0) // kv_block

            def kv_step(carry):
                b, m, denom, acc = carry
                pages = jax.lax.dynamic_slice_in_dim(table, b * kv_pages, kv_pages)[None]
                kv = gather_sequences(cache, pages, dtype)[0]  # [KB, 2H, D]
                kv_pos = b * kv_block + jnp.arange(kv_block)
                mask = (kv_pos[None, :] <= row_pos[:, None]) & row_live[:, None]
                if sliding_window is not None:
                    mask &= kv_pos[None, :] > row_pos[:, None] - sliding_window
                new_m, new_denom, new_acc = [], [], []
                for h in range(num_kv_heads):
                    s = jnp.dot(heads[h], kv[:, 2 * h].T, preferred_element_type=jnp.float32)
                    s = s * sm_scale
                    if soft_cap is not None:
                        s = soft_cap * jnp.tanh(s / soft_cap)
                    values = kv[:, 2 * h + 1].astype(jnp.float32)
                    m_h, denom_h, acc_h = online_step(
                        m[h], denom[h], acc[h], s, mask, lambda p, v=values: jnp.dot(p, v)
                    )
                    new_m.append(m_h)
                    new_denom.append(denom_h)
                    new_acc.append(acc_h)
                return b + 1, jnp.stack(new_m), jnp.stack(new_denom), jnp.stack(new_acc)

            init = (
                first_kv,
                jnp.full((num_kv_heads, rows_per_head), MASK_VALUE, jnp.float32),
                jnp.zeros((num_kv_heads, rows_per_head), jnp.float32),
                jnp.zeros((num_kv_heads, rows_per_head, head_dim), jnp.float32),
            )
            last_block = last // kv_block + 1
            _, _, denom, acc = jax.lax.while_loop(lambda c: c[0] < last_block, kv_step, init)
            acc = finish(denom, acc)  # [Hkv, QB * G, D]
            block_out = acc.reshape(num_kv_heads, q_block, group, head_dim).transpose(1, 0, 2, 3)
            current = jax.lax.dynamic_slice_in_dim(out, first, q_block)
            block_out = jnp.where(in_seq[:, None, None, None], block_out, current)
            return jax.lax.dynamic_update_slice_in_dim(out, block_out, first, axis=0)

        num_blocks = (end - start + q_block - 1) // q_block
        return jax.lax.fori_loop(0, num_blocks, query_block, out)

    return jax.lax.fori_loop(md.distribution[0], md.num_seqs[0], sequence, out)
