"""spec-decode-gain: each measured condition, with the speculative arm's verifier switched
off, lands on the other side of its threshold (the real experiment at tiny size)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from counterfactual_helpers import assert_fails, metric_values
from spec_exp_helpers import TINY, run_tiny

from claimbench.engine.worker.acceptance import accept
from claimbench.engine.worker.sampler import SamplingBatch

CLAIM = "spec-decode-gain"


def greedy_batch(num_seqs: int) -> SamplingBatch:
    zeros = jnp.zeros(num_seqs, jnp.int32)
    return SamplingBatch(
        temperature=jnp.zeros(num_seqs),
        top_k=zeros,
        top_p=jnp.ones(num_seqs),
        seeds=zeros,
        output_index=zeros,
        all_greedy=jnp.bool_(True),
    )


def test_acceptance_rules_emit_the_drafts_or_none_of_them():
    # One sequence, k = 3, vocabulary 5: the target picks 1, 2, 3, 4 at its four positions;
    # the drafts are 1, 0, 3 (the first agrees, the second does not), all three real.
    logits = jnp.eye(5)[jnp.array([[1, 2, 3, 4]])] * 10.0
    drafts, num_draft = jnp.array([[1, 0, 3]]), jnp.array([3])
    batch = greedy_batch(1)
    tokens, _, accepted = accept(logits, drafts, num_draft, batch)
    assert accepted.tolist() == [1] and tokens[0, :2].tolist() == [1, 2]  # exact: 1, then 2
    tokens, _, accepted = accept(logits, drafts, num_draft, batch, "all")
    assert accepted.tolist() == [3] and tokens[0].tolist() == [1, 0, 3, 4]  # drafts + bonus
    tokens, _, accepted = accept(logits, drafts, num_draft, batch, "none")
    assert accepted.tolist() == [0] and tokens[0, 0].tolist() == 1  # the target's own only
    with pytest.raises(ValueError, match="'some'"):
        accept(logits, drafts, num_draft, batch, "some")


@pytest.mark.slow
def test_forced_acceptance_breaks_greedy_identity_and_the_control_sees_it():
    # A stranger draft (seed 1), its tokens emitted unverified by the speculative engine.
    frame = run_tiny(CLAIM, TINY | {"counterfactual": "force-accept"}, draft_seed=1)
    assert_fails(CLAIM, "greedy_mismatch", metric_values(frame, "greedy_mismatch"))
    assert all(v > 0 for v in metric_values(frame, "greedy_mismatch_control"))
    assert metric_values(frame, "draft_acceptance_rate") == [1.0, 1.0]


@pytest.mark.slow
def test_exact_verification_keeps_greedy_identity_with_the_same_stranger():
    frame = run_tiny(CLAIM, TINY, draft_seed=1)
    assert metric_values(frame, "greedy_mismatch") == [0.0, 0.0]


@pytest.mark.slow
def test_rejecting_every_draft_leaves_speculation_its_cost_alone():
    # The target as its own draft, every draft rejected: each step drafts 3 tokens and
    # verifies 4 to emit 1, so speculation is several times slower than plain decoding.
    frame = run_tiny(CLAIM, TINY | {"counterfactual": "force-reject"}, draft_seed=0)
    assert metric_values(frame, "draft_acceptance_rate") == [0.0, 0.0]
    assert metric_values(frame, "greedy_mismatch") == [0.0, 0.0]
    assert_fails(CLAIM, "speedup", metric_values(frame, "speedup"))
