"""spec-vs-batching at a tiny size: the batched comparison's mechanism, never its verdict."""

import pytest
from spec_exp_helpers import TINY, run_tiny, values


@pytest.mark.slow
def test_tiny_batched_run_records_speedup_at_b32_with_n_gram_too():
    params = {**TINY, "batch": 4, "proposer": "ngram"}
    frame = run_tiny("spec-vs-batching", params, draft_seed=0)
    assert len(values(frame, "speedup_at_b32")) == 2
    assert values(frame, "greedy_mismatch") == [0.0, 0.0]
    # Every per-step count adds up: accepted <= draft tokens <= k per draft.
    drafts, tokens = values(frame, "num_drafts"), values(frame, "num_draft_tokens")
    accepted = values(frame, "num_accepted_tokens")
    for d, t, a in zip(drafts, tokens, accepted, strict=True):
        assert 0 <= a <= t <= params["num_spec_tokens"] * d
