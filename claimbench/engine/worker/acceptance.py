"""Exact acceptance of draft tokens, inside the jitted step (device).

The target model scores a sequence's k draft tokens in one step (a verify chunk of 1 + k
tokens) and ``accept`` keeps the longest prefix the target agrees with, plus one token of its
own, so each step emits 1..k+1 tokens. Greedy and seeded sampled output are token-identical
to plain decoding: a position's token is the one the plain sampler draws there (same key),
and drafts are accepted while they equal it, so a request's tokens never depend on the
proposer (spec/), on how many drafts a step could verify, or on what shared its batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.engine.worker.sampler import SamplingBatch, greedy_tokens, sample


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
    logits: jax.Array, draft_tokens: jax.Array, num_draft: jax.Array, batch: SamplingBatch
) -> tuple[jax.Array, jax.Array]:
    num_seqs, width, vocab = logits.shape
    # The token plain decoding samples at every position, under the same key (request seed,
    # output index): after the sequence, after draft token 0, ...
    rows = _per_position(batch, width)
    target = sample(logits.reshape(-1, vocab), rows)[0].reshape(num_seqs, width)
    # A draft token is accepted while it is exactly the target's sample. Every emitted token
    # is then the one plain decoding emits, whoever proposed, however many drafts the step
    # verified and whatever shared the batch; its distribution is the target's by
    # construction. A draft sampled under the same key shares each token id's Gumbel noise
    # with the target (draft_steps.py), so it guesses the target's token whenever their
    # distributions agree; with a one-hot proposer (n-gram) a draft is accepted with
    # probability p(x), as the rejection rule of Leviathan et al. would accept it.
    agree = (draft_tokens == target[:, :-1]) & (jnp.arange(width - 1) < num_draft[:, None])
    return target, _leading_true(agree)


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
    batch: SamplingBatch,
    rule: str = "exact",
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Verify each sequence's draft tokens against the target's logits.

    logits f32[N, 1 + k, V] at each sequence's last token and after each of its draft
    tokens; draft_tokens i32[N, k] (the first num_draft i32[N] real) -> (tokens
    i32[N, 1 + k], of which the first num_accepted + 1 are emitted; the target's log-prob of
    each token f32[N, 1 + k]; num_accepted i32[N]).
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
            lambda: _accept_sampled(logits, draft_tokens, num_draft, batch),
        )
    logprobs = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), tokens[..., None], -1)
    return tokens, logprobs[..., 0], num_accepted
