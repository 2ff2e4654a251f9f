"""The masking constant of every attention path, and the online-softmax step of the XLA ones.

Attention over KV blocks keeps, per query row, the running max ``m`` of its scores, the
running sum ``denom`` of their exponentials (relative to ``m``) and the running weighted sum
``acc`` of values; each block rescales the old sums to the new max and adds its own. The
result is ``acc / denom``. xla_decode.py and xla_prefill.py fold blocks with ``online_step``;
the Pallas kernel (rpa_kernel.py) does the same in VMEM with lane-replicated statistics.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

# Masked scores: finite, so a row with nothing visible yet never computes inf - inf, and
# far enough below any real score that exp(MASK_VALUE - m) is 0 once a real key is seen.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def online_step(
    m: jax.Array,
    denom: jax.Array,
    acc: jax.Array,
    scores: jax.Array,
    mask: jax.Array,
    weighted_values: Callable[[jax.Array], jax.Array],
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Fold one KV block into the running (m, denom, acc).

    scores f32[..., L] and mask b[..., L] (broadcastable) for the block's L keys; m and
    denom f32[...]; acc f32[..., D]; ``weighted_values(p)`` maps probabilities
    f32[..., L] to their weighted value sum f32[..., D]. Masked keys get weight 0.
    """
    scores = jnp.where(mask, scores, MASK_VALUE)
    m_new = jnp.maximum(m, jnp.max(scores, axis=-1))
    p = jnp.where(mask, jnp.exp(scores - m_new[..., None]), 0.0)
    rescale = jnp.exp(m - m_new)
    denom = denom * rescale + jnp.sum(p, axis=-1)
    return m_new, denom, acc * rescale[..., None] + weighted_values(p)


def finish(denom: jax.Array, acc: jax.Array) -> jax.Array:
    """acc / denom, rows that saw no key (denom 0) staying 0."""
    return acc / jnp.maximum(denom, 1e-30)[..., None]
