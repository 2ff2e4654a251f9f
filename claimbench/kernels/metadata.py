"""Attention metadata for one flattened, ragged engine step.

Every scheduled token of every sequence is packed into one array of
``num_tokens`` (padded to a bucket). Sequences are ordered decode-only first,
then prefill-only, then mixed, as in Ragged Paged Attention v3, so a kernel can
pick a specialised path per group from ``distribution``.

Page 0 of every KV cache is the null page: the block manager never hands it
out, padded tokens write their K/V there and padded sequence slots point at it.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax

NULL_PAGE = 0


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class AttentionMetadata:
    """Shapes use ``T`` = padded token count, ``N`` = padded sequence slots."""

    slot_mapping: jax.Array  # i32[T] page * page_size + offset of each new token's KV
    cu_q_lens: jax.Array  # i32[N + 1] start of each sequence's tokens in the flat batch
    kv_lens: jax.Array  # i32[N] KV length of each sequence after this step's write (0 = pad)
    page_indices: jax.Array  # i32[N, pages_per_seq] block table, NULL_PAGE where unused
    num_seqs: jax.Array  # i32[1] real sequences in this step
    distribution: jax.Array  # i32[3] ends of the decode-only, prefill-only, mixed groups

    @property
    def max_num_seqs(self) -> int:
        return self.kv_lens.shape[0]

    @property
    def pages_per_seq(self) -> int:
        return self.page_indices.shape[1]
