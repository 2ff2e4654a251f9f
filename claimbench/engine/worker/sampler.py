"""Sampling: per-request parameters (host) and the batched token sampler (device).

Each sequence's random key is derived from (request seed, output index) alone, so a
seeded request samples the same tokens whatever else shares its batch, and again
after a preemption and recompute.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import jax
import jax.numpy as jnp

MIN_TEMPERATURE = 1e-5  # below this a request is greedy
# The step's arrays hold top_k, token counts and stop ids as int32 and seeds as uint32: a
# value past them would overflow the batch every request of the step shares.
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class SamplingParams:
    """How one request's tokens are chosen and when it stops."""

    max_tokens: int = 16  # output tokens at most
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # keep the k most likely tokens; 0 = all
    top_p: float = 1.0  # keep the smallest set with this much probability
    seed: int | None = None  # None = derived from the engine seed and the request
    stop_token_ids: tuple[int, ...] = ()  # stop after emitting any of these
    ignore_eos: bool = False  # keep going past the model's end-of-sequence token
    logprobs: bool = False  # return the log-prob of each sampled token
    prompt_logprobs: bool = False  # return log p(prompt[i] | prompt[:i]) for i >= 1

    def __post_init__(self) -> None:
        # Types first: a server passes user JSON straight in, and 2.5 or True must not be
        # coerced into a token count, nor NaN into a temperature (it samples token 0 forever).
        for name in ("max_tokens", "top_k"):
            _require_int(name, getattr(self, name))
        if self.seed is not None:
            _require_int("seed", self.seed)
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(_as_float(value)):
                raise ValueError(f"{name} must be finite, got {value!r}")
        for name in ("ignore_eos", "logprobs", "prompt_logprobs"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.stop_token_ids, str | bytes) or not hasattr(
            self.stop_token_ids, "__iter__"
        ):
            raise ValueError(f"stop_token_ids must be a list of ints, got {self.stop_token_ids!r}")
        # Taken once: a generator would be used up by the checks and leave nothing to store.
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for token in self.stop_token_ids:
            _require_int("stop_token_ids[i]", token)
            if not 0 <= token <= INT32_MAX:
                raise ValueError(f"stop_token_ids must be in [0, {INT32_MAX}], got {token}")
        if not 1 <= self.max_tokens <= INT32_MAX:
            raise ValueError(f"max_tokens must be in [1, {INT32_MAX}], got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 <= self.top_k <= INT32_MAX:
            # Above the vocabulary is "every token" (the sampler's rule); above int32, an error.
            raise ValueError(f"top_k must be in [0, {INT32_MAX}] (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")
        # Stored as Python numbers: a numpy integer (np.int16(32767)) passes the range checks
        # but wraps in the scheduler's sums (prompt + max_tokens) and breaks every later step.
        for name in ("max_tokens", "top_k"):
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("temperature", "top_p"):
            object.__setattr__(self, name, _as_float(getattr(self, name)))
        if self.seed is not None:
            object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature < MIN_TEMPERATURE


def _as_float(value: numbers.Real) -> float:
    """``value`` as a float; an integer past float range is infinite (float() would raise)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _require_int(name: str, value: object) -> None:
    """ValueError unless ``value`` is an integer (bool and integral floats included out)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")


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


def _random_tokens(logits: jax.Array, batch: SamplingBatch) -> jax.Array:
    filtered = _filtered_logits(logits, batch)
    keys = jax.vmap(lambda s, i: jax.random.fold_in(jax.random.key(s), i))(
        batch.seeds, batch.output_index
    )
    sampled = jax.vmap(jax.random.categorical)(keys, filtered)
    return jnp.where(batch.temperature < MIN_TEMPERATURE, greedy_tokens(logits), sampled).astype(
        jnp.int32
    )


def greedy_tokens(logits: jax.Array) -> jax.Array:
    """The first index of each row's maximum: i32[N]. Same as argmax, but a max and a min
    reduction run about twice as fast on XLA:CPU as argmax's (value, index) reduction."""
    vocab = logits.shape[-1]
    best = jnp.max(logits, axis=-1, keepdims=True)
    index = jnp.min(jnp.where(logits == best, jnp.arange(vocab), vocab), axis=-1)
    return jnp.minimum(index, vocab - 1).astype(jnp.int32)  # a NaN row matches nothing


def sample(logits: jax.Array, batch: SamplingBatch) -> tuple[jax.Array, jax.Array]:
    """logits f32[N, V] -> (tokens i32[N], log-prob of each under the model, f32[N]).

    The returned log-probs are the model's own (before temperature and filtering).
    """
    tokens = jax.lax.cond(
        batch.all_greedy,
        lambda: greedy_tokens(logits),
        lambda: _random_tokens(logits, batch),
    )
    chosen = jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0]
    return tokens, chosen - jax.nn.logsumexp(logits, axis=-1)
