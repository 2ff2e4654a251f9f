"""Ragged paged attention in XLA, blocked: the portable "xla" backend, with plug-in kernels.

The flattened step batch mixes decode tokens and prefill chunks of many sequences (see
``metadata.AttentionMetadata``). The step's K/V are written into the pages first; then
the decode-only slots (the first ``distribution[0]``, one token each) are attended
together, and the prefill and mixed sequences one at a time, flash-style over causal KV
blocks. K/V are read per sequence through its block table, a block at a time, never copied
once per query token. Either part is a plug-in: ``DecodeAttention`` (default
xla_decode.py) and ``PrefillAttention`` (default xla_prefill.py); the "cpu" backend plugs
in the native kernels (native_attention.py). reference.py is the naive version of the
same computation, which the tests hold every backend to.

With ``verify_width`` (speculative decoding: 1 + k) a step whose prefill and mixed chunks
are all that short, a verify step of two or more sequences, attends them all at once
(xla_verify.py) instead of one sequence at a time; a step holding a longer chunk takes the
prefill path as before.
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import (
    AttentionMetadata,
    check_inputs,
    check_metadata_values,
    is_concrete,
)
from claimbench.kernels.paged_io import write_kv
from claimbench.kernels.xla_decode import decode_attention
from claimbench.kernels.xla_prefill import prefill_attention
from claimbench.kernels.xla_verify import takes_verify_path, verify_attention


class DecodeAttention(Protocol):
    """Attends the decode-only slots: token t is sequence t's one new token, at position
    kv_lens[t] - 1 (the cache already holds it).

    qg f[n, Hkv, G, D] for slots 0..n-1 -> f32[n, Hkv, G, D], zeros for the slots past
    the decode group (``md.distribution[0]``); ``dtype`` is the dtype K/V are read in.
    """

    def __call__(
        self,
        qg: jax.Array,
        cache: LayerKV,
        md: AttentionMetadata,
        dtype: jnp.dtype,
        sm_scale: float,
        sliding_window: int | None,
        soft_cap: float | None,
    ) -> jax.Array: ...


class PrefillAttention(Protocol):
    """Attends the prefill-only and mixed sequences (``md.distribution[0]`` to
    ``md.num_seqs[0]``), causally over their pages, which already hold this step's tokens.

    qg f[T, Hkv, G, D]; fills those sequences' rows of out f32[T, Hkv, G, D] and returns
    it, the other rows passing through unchanged.
    """

    def __call__(
        self,
        qg: jax.Array,
        cache: LayerKV,
        md: AttentionMetadata,
        dtype: jnp.dtype,
        sm_scale: float,
        sliding_window: int | None,
        soft_cap: float | None,
        out: jax.Array,
    ) -> jax.Array: ...


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
    decode: DecodeAttention = decode_attention,
    prefill: PrefillAttention = prefill_attention,
    verify_width: int | None = None,
) -> tuple[jax.Array, LayerKV]:
    """Write the new K/V, then attend every token over its own sequence's cache.

    q: f[T, num_q_heads, D]; k, v: f[T, num_kv_heads, D]; cache pages
    [num_pages, page_size, 2 * num_kv_heads, D]. Returns (f[T, num_q_heads, D], cache).
    Token t of sequence i sits at position kv_lens[i] - q_len_i + (t - cu_q_lens[i]) and
    attends to KV positions <= its own (and > position - sliding_window if set); rows of
    tokens that belong to no sequence are zero. Inputs are checked (ValueError): shapes
    always, metadata values when concrete (called outside jit).
    """
    check_inputs(
        q, k, v, cache, md, sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap
    )
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    if is_concrete(md):
        num_pages, page_size = cache.pages.shape[:2]
        check_metadata_values(md, num_tokens=num_tokens, num_pages=num_pages, page_size=page_size)
    group = num_q_heads // num_kv_heads
    cache = write_kv(cache, k, v, md.slot_mapping)
    qg = q.reshape(num_tokens, num_kv_heads, group, head_dim)

    # Decode-only slots: token t belongs to sequence t and sits at kv_lens[t] - 1.
    num_decode_slots = min(md.max_num_seqs, num_tokens)
    dec_out = decode(qg[:num_decode_slots], cache, md, q.dtype, sm_scale, sliding_window, soft_cap)
    is_decode = jnp.arange(num_tokens) < md.distribution[0]
    out = jnp.zeros((num_tokens, num_kv_heads, group, head_dim), jnp.float32)
    out = out.at[:num_decode_slots].set(dec_out)
    out = jnp.where(is_decode[:, None, None, None], out, 0.0)

    # Prefill-only and mixed sequences (few per step), one at a time; or, verifying, every
    # chunk together.
    args = (qg, cache, md, q.dtype, sm_scale, sliding_window, soft_cap)
    if verify_width is None:
        out = prefill(*args, out)
    else:
        out = jax.lax.cond(
            takes_verify_path(md, verify_width),
            lambda out: verify_attention(*args, out, width=verify_width),
            lambda out: prefill(*args, out),
            out,
        )
    return out.reshape(num_tokens, num_q_heads, head_dim).astype(q.dtype), cache
