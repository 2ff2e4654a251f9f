"""Speculative decoding: the n-gram proposer (host) and exact acceptance (device).

A proposer guesses up to k tokens to follow a sequence; the target model scores all of them
in one step (a verify chunk of 1 + k tokens) and ``accept`` keeps the longest prefix the
target agrees with, plus one token of its own, so each step emits 1..k+1 tokens. Greedy
output is token-identical to plain decoding; sampled output has the target's distribution
(Leviathan et al. 2023, Chen et al. 2023). The draft-model proposer is draft_runner.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from claimbench.engine.worker.sampler import (
    MIN_TEMPERATURE,
    SamplingBatch,
    filtered_probs,
    greedy_tokens,
)

PROMPT_LOOKUP_MIN = 1  # shortest suffix n-gram the n-gram proposer matches
PROMPT_LOOKUP_MAX = 4  # longest
# Random streams under a token's key (seed, output index): the acceptance coin is its own
# stream, so the token a position finally samples uses the plain sampler's key.
ACCEPT_STREAM = 1


def propose_ngram(
    token_ids: Sequence[int],
    k: int,
    min_n: int = PROMPT_LOOKUP_MIN,
    max_n: int = PROMPT_LOOKUP_MAX,
) -> list[int]:
    """Prompt lookup (vLLM's n-gram proposer): find the longest suffix of ``token_ids`` of
    length n in [min_n, max_n] that also occurs earlier, and propose the (up to) k tokens that
    followed its most recent earlier occurrence. [] when nothing matches."""
    tokens = np.asarray(token_ids, np.int64)
    num = len(tokens)
    for n in range(min(max_n, num - 1), min_n - 1, -1):
        # Windows that end before the last token: the suffix itself is not an occurrence.
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: num - 1], n)
        starts = np.flatnonzero(np.all(windows == tokens[num - n :], axis=1))
        if starts.size:
            # The most recent occurrence: the freshest context predicts best.
            follow = int(starts[-1]) + n
            return tokens[follow : follow + k].tolist()
    return []


def pad_vocab(draft_probs: jax.Array, vocab: int) -> jax.Array:
    """f32[..., V_draft] -> f32[..., vocab]: a draft's distributions over the target's
    vocabulary, whose first V_draft ids it shares (draft_model.check_draft). The ids beyond
    the draft's have probability 0, as logits of -inf would give: it never proposes them."""
    missing = vocab - draft_probs.shape[-1]
    if missing == 0:
        return draft_probs
    return jnp.pad(draft_probs, [(0, 0)] * (draft_probs.ndim - 1) + [(0, missing)])


def _leading_true(flags: jax.Array) -> jax.Array:
    """b[N, k] -> i32[N]: how many leading entries of each row are True."""
    return jnp.sum(jnp.cumprod(flags.astype(jnp.int32), axis=1), axis=1)


def _per_position(batch: SamplingBatch, width: int) -> SamplingBatch:
    """Each sequence's sampling row repeated for its ``width`` positions: [N * width]."""
    return SamplingBatch(
        temperature=jnp.repeat(batch.temperature, width),
        top_k=jnp.repeat(batch.top_k, width),
        top_p=jnp.repeat(batch.top_p, width),
        seeds=jnp.repeat(batch.seeds, width),
        output_index=(batch.output_index[:, None] + jnp.arange(width)).reshape(-1),
        all_greedy=batch.all_greedy,
    )


def _accept_greedy(
    logits: jax.Array, draft_tokens: jax.Array, num_draft: jax.Array
) -> tuple[jax.Array, jax.Array]:
    num_seqs, width, vocab = logits.shape
    # The target's choice at every position: after the sequence, after draft token 0, ...
    target = greedy_tokens(logits.reshape(-1, vocab)).reshape(num_seqs, width)
    # A draft token is accepted while it is exactly what the target would have chosen.
    agree = (draft_tokens == target[:, :-1]) & (jnp.arange(width - 1) < num_draft[:, None])
    num_accepted = _leading_true(agree)
    # Accepted draft tokens equal the target's, and position num_accepted holds the target's
    # own token (the correction, or the bonus when all were accepted): emit target[:a + 1].
    return target, num_accepted


def _accept_sampled(
    logits: jax.Array,
    draft_tokens: jax.Array,
    num_draft: jax.Array,
    draft_probs: jax.Array | None,
    batch: SamplingBatch,
) -> tuple[jax.Array, jax.Array]:
    num_seqs, width, vocab = logits.shape
    k = width - 1
    rows = _per_position(batch, width)
    # p: the target's distribution at each position, after the request's filtering.
    p = filtered_probs(logits.reshape(-1, vocab), rows).reshape(num_seqs, width, vocab)
    # q: the distribution each draft token was drawn from; a one-hot for a deterministic
    # proposer (n-gram), which makes the rule below accept token x with probability p(x).
    # A draft with a smaller vocabulary (a prefix of the target's) gives them 0 beyond it.
    q = (
        jax.nn.one_hot(draft_tokens, vocab)
        if draft_probs is None
        else pad_vocab(draft_probs, vocab)
    )
    p_draft = jnp.take_along_axis(p[:, :k], draft_tokens[..., None], -1)[..., 0]  # p_j(x_j)
    q_draft = jnp.take_along_axis(q, draft_tokens[..., None], -1)[..., 0]  # q_j(x_j) > 0
    keys = jax.vmap(lambda s, i: jax.random.fold_in(jax.random.key(s), i))(
        rows.seeds, rows.output_index
    ).reshape(num_seqs, width)
    coin_keys = jax.vmap(jax.vmap(lambda key: jax.random.fold_in(key, ACCEPT_STREAM)))(keys)
    u = jax.vmap(jax.vmap(jax.random.uniform))(coin_keys[:, :k])
    # Accept x_j with probability min(1, p_j(x_j) / q_j(x_j)): u < p/q, written without the
    # division; only the first num_draft positions hold real draft tokens.
    accept = (u * q_draft < p_draft) & (jnp.arange(k) < num_draft[:, None])
    # Verification stops at the first rejection: later draft tokens were conditioned on it.
    num_accepted = _leading_true(accept)
    # On a rejection at position a the emitted token comes from normalise(max(0, p_a - q_a)):
    # the mass p has and q under-proposed, which makes the emitted token exactly p-distributed.
    residual = jnp.maximum(p[:, :k] - q, 0.0)
    residual = jnp.concatenate([residual, p[:, k:]], axis=1)  # [N, 1 + k, V]
    at = num_accepted[:, None, None]
    p_at = jnp.take_along_axis(p, at, axis=1)[:, 0]  # [N, V]
    residual_at = jnp.take_along_axis(residual, at, axis=1)[:, 0]
    mass = jnp.sum(residual_at, axis=-1, keepdims=True)
    # When all num_draft tokens were accepted position a = num_draft samples a bonus token from
    # p_a itself. A zero residual (p == q, rejection impossible up to rounding) falls back to p.
    rejected = (num_accepted < num_draft)[:, None] & (mass > 0)
    final = jnp.where(rejected, residual_at / jnp.where(mass > 0, mass, 1.0), p_at)
    key_at = jnp.take_along_axis(keys, num_accepted[:, None], axis=1)[:, 0]
    last = jax.vmap(jax.random.categorical)(key_at, jnp.log(final)).astype(jnp.int32)
    # Emit x_0 .. x_{a-1}, then the token sampled at a; later positions are never read.
    padded = jnp.concatenate([draft_tokens, jnp.zeros((num_seqs, 1), jnp.int32)], axis=1)
    tokens = jnp.where(jnp.arange(width) == num_accepted[:, None], last[:, None], padded)
    greedy_target, greedy_accepted = _accept_greedy(logits, draft_tokens, num_draft)
    is_greedy = rows.temperature.reshape(num_seqs, width)[:, 0] < MIN_TEMPERATURE
    tokens = jnp.where(is_greedy[:, None], greedy_target, tokens)
    return tokens, jnp.where(is_greedy, greedy_accepted, num_accepted)


# How a verify step decides: "exact" is the rule above (greedy output identical to plain
# decoding). "all" and "none" are controls that switch verification off, never served: "all"
# emits every draft token unverified (what an unchecked speculator would serve, so a greedy
# mismatch counter can be shown to see it), "none" rejects every draft (speculation's cost
# with none of its gain).
ACCEPTANCE_RULES = ("exact", "all", "none")


def _accept_forced(
    logits: jax.Array, draft_tokens: jax.Array, num_draft: jax.Array, take_drafts: bool
) -> tuple[jax.Array, jax.Array]:
    target, _ = _accept_greedy(logits, draft_tokens, num_draft)
    if not take_drafts:
        return target, jnp.zeros_like(num_draft)
    # The drafts in their positions, then the target's own token after the last of them.
    drafts = jnp.pad(draft_tokens, ((0, 0), (0, 1)))
    width = target.shape[1]
    tokens = jnp.where(jnp.arange(width) < num_draft[:, None], drafts, target)
    return tokens, num_draft


def accept(
    logits: jax.Array,
    draft_tokens: jax.Array,
    num_draft: jax.Array,
    draft_probs: jax.Array | None,
    batch: SamplingBatch,
    rule: str = "exact",
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Verify each sequence's draft tokens against the target's logits.

    logits f32[N, 1 + k, V] at each sequence's last token and after each of its draft
    tokens; draft_tokens i32[N, k] (the first num_draft i32[N] real); draft_probs
    f32[N, k, V], the distribution each draft token was sampled from, or None for a
    deterministic proposer -> (tokens i32[N, 1 + k], of which the first num_accepted + 1
    are emitted; the target's log-prob of each token f32[N, 1 + k]; num_accepted i32[N]).
    ``rule`` is one of ACCEPTANCE_RULES (static: each compiles its own step).
    """
    if rule not in ACCEPTANCE_RULES:
        raise ValueError(f"acceptance rule must be one of {ACCEPTANCE_RULES}, got {rule!r}")
    if rule != "exact":
        tokens, num_accepted = _accept_forced(logits, draft_tokens, num_draft, rule == "all")
    else:
        tokens, num_accepted = jax.lax.cond(
            batch.all_greedy,
            lambda: _accept_greedy(logits, draft_tokens, num_draft),
            lambda: _accept_sampled(logits, draft_tokens, num_draft, draft_probs, batch),
        )
    logprobs = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), tokens[..., None], -1)
    return tokens, logprobs[..., 0], num_accepted
