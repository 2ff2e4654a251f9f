"""spec-decode-gain at a tiny size: the comparison's mechanism, never its verdict."""

import pytest
from engine_tracking import track_builds
from spec_exp_helpers import TINY, TinySpecContext, run_tiny, values


@pytest.mark.slow
@pytest.mark.parametrize("draft_seed", [0, 1])
def test_tiny_run_records_speedup_exact_greedy_and_acceptance(draft_seed):
    frame = run_tiny("spec-decode-gain", TINY, draft_seed)
    assert len(values(frame, "speedup")) == 2 and all(v > 0 for v in values(frame, "speedup"))
    # Exact greedy acceptance: the speculative arm emits plain decoding's tokens.
    assert values(frame, "greedy_mismatch") == [0.0, 0.0]
    rate = values(frame, "draft_acceptance_rate")
    control = values(frame, "greedy_mismatch_control")
    if draft_seed == 0:  # the target as its own draft: every draft token accepted
        assert rate == [1.0, 1.0] and values(frame, "mean_acceptance_length") == [4.0, 4.0]
        assert control == [0.0, 0.0]  # its tokens unverified are the target's own
    else:  # a random stranger of 97 tokens: nearly every draft rejected
        assert all(r < 0.2 for r in rate)
        # The positive control fires: the stranger's drafts, accepted unverified, differ.
        assert len(control) == 2 and all(c > 0 for c in control)
    per_pos = frame[frame["metric"] == "acceptance_rate_per_pos"]
    assert len(per_pos) == 2 * TINY["num_spec_tokens"]
    throughput = frame[frame["metric"] == "output_throughput"]
    assert len(throughput) == 4 and (throughput["value"] > 0).all()


@pytest.mark.slow
def test_bad_params_are_named():
    with pytest.raises(ValueError, match="param proposer must be draft or ngram, got 'medusa'"):
        run_tiny("spec-decode-gain", {**TINY, "proposer": "medusa"}, 0)
    with pytest.raises(ValueError, match="unknown|num_spec_token"):
        run_tiny("spec-decode-gain", {**TINY, "num_spec_token": 4}, 0)


@pytest.mark.slow
def test_one_engine_at_a_time_taking_turns_within_trials(monkeypatch):
    built = track_builds(TinySpecContext, monkeypatch)
    frame = run_tiny("spec-decode-gain", TINY, draft_seed=1, trials=3)
    # The plain engine is gone before the speculative one (target and draft) is built, and
    # the other way round; the arms alternate within trials (plain, spec | spec, plain |
    # plain, spec), so each trial's last engine starts the next. Then the control's engine:
    # the speculative engine again, its verifier forced to accept every draft.
    kinds = [o["speculative"] + ("+model" if "model_path" in o else "") for o, _ in built]
    assert kinds == ["none", "draft", "none", "draft", "draft"]
    assert [alive for _, alive in built] == [0, 0, 0, 0, 0]
    throughput = frame[frame["metric"] == "output_throughput"].sort_values(["trial"])
    assert len(throughput) == 6
    # Each trial pairs both arms on the same prompts: a stranger's drafts, plain's tokens.
    assert values(frame, "greedy_mismatch") == [0.0, 0.0, 0.0]
    assert len(values(frame, "speedup")) == 3
