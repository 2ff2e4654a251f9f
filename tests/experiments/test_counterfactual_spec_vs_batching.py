"""spec-vs-batching: speedup_at_b32, with the verifier forced to accept free proposals, lands
on the other side of its threshold (the real experiment at tiny size)."""

from __future__ import annotations

import pytest
from counterfactual_helpers import assert_mean_fails, metric_values
from spec_exp_helpers import TINY, run_tiny

CLAIM = "spec-vs-batching"


@pytest.mark.slow
def test_free_proposals_accepted_unverified_multiply_a_batched_steps_tokens():
    # The n-gram proposer costs no model pass; forced acceptance emits up to 1 + 3 tokens per
    # sequence per step, and on a device whose step takes a fixed time (device_step_s: bound
    # by its weights, compute to spare) a verify step costs what a decode step costs, so 32
    # sequences gain several tokens a step: the competition for idle compute the claim rests
    # on is taken away. (This host's CPU pays for the verify chunk's tokens, more than the
    # forced acceptance gains: the real device's step would decide it alone.) Six tokens a
    # sequence: five decode steps against two verify steps, a gain still far past 1.1, at
    # fewer of the fixed steps that are most of the test's time.
    params = TINY | {
        "output_len": 6,
        "batch": 32,
        "proposer": "ngram",
        "counterfactual": "force-accept",
        "device_step_s": 0.25,
    }
    frame = run_tiny(CLAIM, params, draft_seed=0)
    assert all(v > 1.5 for v in metric_values(frame, "mean_acceptance_length"))
    assert_mean_fails(CLAIM, "speedup_at_b32", metric_values(frame, "speedup_at_b32"))
