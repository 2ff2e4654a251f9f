"""Pure-jnp ragged paged attention with the KV write: the XLA backend and the test reference.

The flattened step batch mixes decode tokens and prefill chunks of many
sequences (see ``metadata.AttentionMetadata``). The step's K/V are written into
the pages first; then decode-only slots (the first ``distribution[0]``, one
token each) are attended together (xla_decode.py, or a native kernel passed as
``decode``), and prefill and mixed sequences one at a time, flash-style over
causal KV blocks (xla_prefill.py, or a native kernel passed as ``prefill``).
K/V are read per sequence through its block table, never copied once per query
token.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.paged_io import MASK_VALUE, gather_sequences, write_kv
from claimbench.kernels.xla_decode import decode_attention
from claimbench.kernels.xla_prefill import prefill_attention

__all__ = [
    "MASK_VALUE",
    "dense_causal_attention",
    "gather_sequences",
    "ragged_paged_attention",
    "write_kv",
]

# decode(qg [n, Hkv, G, D], cache, md, dtype, sm_scale, sliding_window, soft_cap)
# -> f32[n, Hkv, G, D] for the first n slots, zeros past the decode group.
DecodeFn = Callable[..., jax.Array]
# prefill(qg [T, Hkv, G, D], cache, md, dtype, sm_scale, sliding_window, soft_cap, out)
# -> out f32[T, Hkv, G, D] with the prefill and mixed sequences' rows filled in.
PrefillFn = Callable[..., jax.Array]


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
    decode: DecodeFn | None = None,
    prefill: PrefillFn | None = None,
) -> tuple[jax.Array, LayerKV]:
    """Write the new K/V, then attend every token over its own sequence's cache.

    q: f[T, num_q_heads, D]; k, v: f[T, num_kv_heads, D]; cache pages
    [num_pages, page_size, 2 * num_kv_heads, D]. Returns (f[T, num_q_heads, D], cache).
    Token t of sequence i sits at position kv_lens[i] - q_len_i + (t - cu_q_lens[i]) and
    attends to KV positions <= its own (and > position - sliding_window if set).
    ``decode`` attends the decode-only slots and ``prefill`` the rest (default: XLA).
    """
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads={num_q_heads} not a multiple of num_kv_heads={num_kv_heads}")
    group = num_q_heads // num_kv_heads
    cache = write_kv(cache, k, v, md.slot_mapping)
    qg = q.reshape(num_tokens, num_kv_heads, group, head_dim)

    # Decode-only slots: token t belongs to sequence t and sits at kv_lens[t] - 1.
    num_decode_slots = min(md.max_num_seqs, num_tokens)
    dec_out = (decode or decode_attention)(
        qg[:num_decode_slots], cache, md, q.dtype, sm_scale, sliding_window, soft_cap
    )
    is_decode = jnp.arange(num_tokens) < md.distribution[0]
    out = jnp.zeros((num_tokens, num_kv_heads, group, head_dim), jnp.float32)
    out = out.at[:num_decode_slots].set(dec_out)
    out = jnp.where(is_decode[:, None, None, None], out, 0.0)

    # Prefill-only and mixed sequences (few per step), one at a time.
    out = (prefill or prefill_attention)(
        qg, cache, md, q.dtype, sm_scale, sliding_window, soft_cap, out
    )
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
