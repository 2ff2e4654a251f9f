"""Sampling: the batched token sampler (device); per-request parameters: sampling_params.py.

Each sequence's random key is derived from (request seed, output index) alone, so a
seeded request samples the same tokens whatever else shares its batch, and again
after a preemption and recompute.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from claimbench.engine.sampling_params import MIN_TEMPERATURE
from claimbench.kernels.greedy import greedy_tokens

# "xla" forces XLA's greedy reductions; "native" (or unset) takes the native kernel where
# the matmuls are native too (sampler_path).
SAMPLER_ENV = "CLAIMBENCH_NATIVE_SAMPLER"
SAMPLER_PATHS = ("native", "xla")


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SamplingBatch:
    """Per-sequence-slot sampling inputs; ``N`` = padded sequence slots."""

    temperature: jax.Array  # f32[N], 0 = greedy
    top_k: jax.Array  # i32[N], 0 = off
    top_p: jax.Array  # f32[N]
    seeds: jax.Array  # u32[N]
    output_index: jax.Array  # i32[N] index of the token being sampled in its request's output
    all_greedy: jax.Array  # bool[] skips the sort when no sequence samples


def _filtered_logits(logits: jax.Array, batch: SamplingBatch) -> jax.Array:
    """Temperature, then top-k, then top-p on the renormalized top-k: f32[N, V]."""
    vocab = logits.shape[-1]
    temperature = jnp.maximum(batch.temperature, MIN_TEMPERATURE)[:, None]
    scaled = logits / temperature
    ordered = -jnp.sort(-scaled, axis=-1)  # descending
    k = jnp.where((batch.top_k <= 0) | (batch.top_k > vocab), vocab, batch.top_k)
    rank = jnp.arange(vocab)[None, :]
    ordered = jnp.where(rank < k[:, None], ordered, -jnp.inf)
    probs = jax.nn.softmax(ordered, axis=-1)
    # Keep a token while the mass strictly before it is below top_p (the first always stays).
    keep = (jnp.cumsum(probs, axis=-1) - probs) < batch.top_p[:, None]
    num_keep = jnp.maximum(jnp.sum(keep & (rank < k[:, None]), axis=-1), 1)
    threshold = jnp.take_along_axis(ordered, (num_keep - 1)[:, None], axis=-1)
    return jnp.where(scaled >= threshold, scaled, -jnp.inf)


def filtered_probs(logits: jax.Array, batch: SamplingBatch) -> jax.Array:
    """The distribution a sampling row draws from (temperature, top-k, top-p): f32[N, V].

    Speculative acceptance compares these (the target's p, the draft's q), not the raw
    softmax, so that what it preserves is the distribution the request asked for."""
    return jax.nn.softmax(_filtered_logits(logits, batch), axis=-1)


def _random_tokens(logits: jax.Array, batch: SamplingBatch, greedy: jax.Array) -> jax.Array:
    filtered = _filtered_logits(logits, batch)
    keys = jax.vmap(lambda s, i: jax.random.fold_in(jax.random.key(s), i))(
        batch.seeds, batch.output_index
    )
    sampled = jax.vmap(jax.random.categorical)(keys, filtered)
    return jnp.where(batch.temperature < MIN_TEMPERATURE, greedy, sampled).astype(jnp.int32)


def sampler_path(dense: str, dtype: jnp.dtype) -> str:
    """The greedy reductions a runner's steps use: ``SAMPLER_ENV`` if set to "xla", else
    "native" (kernels/native_greedy.py) where its matmuls are native (one device, the "cpu"
    backend), its model's ``dtype`` (so its logits') is f32 and the native kernels load, and
    "xla" otherwise (``sample`` takes the kernel for f32 logits only). ValueError names a
    bad value."""
    forced = os.environ.get(SAMPLER_ENV)
    if forced and forced not in SAMPLER_PATHS:
        raise ValueError(f"{SAMPLER_ENV}={forced!r}: expected one of {SAMPLER_PATHS}")
    if forced == "xla" or dense != "native" or jnp.dtype(dtype) != jnp.float32:
        return "xla"
    from claimbench.kernels import native_greedy

    return "native" if native_greedy.unavailable_reason() is None else "xla"


def sample(
    logits: jax.Array, batch: SamplingBatch, native: bool = False
) -> tuple[jax.Array, jax.Array]:
    """logits f32[N, V] -> (tokens i32[N], log-prob of each under the model, f32[N]).

    The returned log-probs are the model's own (before temperature and filtering).
    ``native``: each row's greedy token and log-sum-exp come from the native kernel
    (kernels/native_greedy.py, one call on the kernels' threads) for f32 logits; the same
    tokens, the log-probs to rounding.
    """
    if native and logits.dtype == jnp.float32:
        from claimbench.kernels import native_greedy

        greedy, lse = native_greedy.greedy_logsumexp(logits)
    else:
        greedy, lse = greedy_tokens(logits), jax.nn.logsumexp(logits, axis=-1)
    tokens = jax.lax.cond(
        batch.all_greedy,
        lambda: greedy,
        lambda: _random_tokens(logits, batch, greedy),
    )
    chosen = jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0]
    return tokens, chosen - lse
