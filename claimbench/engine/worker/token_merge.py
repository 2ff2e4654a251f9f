"""The token merge of async scheduling (sched/async_sched.py), on the device: a step's input
ids take the previous step's sampled tokens without reading them back to the host first."""

from __future__ import annotations

import jax
import jax.numpy as jnp


@jax.jit
def merge_token_ids(token_ids: jax.Array, src: jax.Array, prev_tokens: jax.Array) -> jax.Array:
    """token_ids i32[T] with position t replaced by prev_tokens[src[t], 0] where src[t] >= 0
    (src i32[T], prev_tokens i32[N', 1 + k]): the previous step's sampled tokens, on device."""
    return jnp.where(src >= 0, prev_tokens[jnp.maximum(src, 0), 0], token_ids)
