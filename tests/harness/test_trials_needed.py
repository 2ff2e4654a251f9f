"""What an inconclusive claim still needs: trials at the observed spread, or too close to call."""

from __future__ import annotations

import math

from scoring_helpers import claim, rows, store_run

from claimbench.harness import confseq, deciding, scoring


def test_an_unclear_condition_says_how_many_trials_would_decide_it(tmp_path):
    # mean 1.7, sd 0.1 over 3 trials against 1.5: the t interval 1.7 +- 0.25 straddles it.
    run = store_run(tmp_path, claim(), rows("gain", [1.6, 1.7, 1.8]))
    score = scoring.score_claim(claim(), [run])
    assert score.verdict == "inconclusive"
    (need,) = deciding.trials_needed(score)
    assert (need.metric, need.num_trials, need.log_space) == ("gain", 3, False)
    n = need.needed
    # The first n whose sequence half-width drops below the gap of 0.2.
    assert confseq.t_cs_factor(n) * 0.1 / math.sqrt(n) < 0.2
    assert confseq.t_cs_factor(n - 1) * 0.1 / math.sqrt(n - 1) >= 0.2
    assert not need.too_close
    assert f"at n = {n}: about {n - 3} more trial(s)" in need.describe()


def test_an_estimate_on_the_threshold_is_too_close_to_call(tmp_path):
    run = store_run(tmp_path, claim(), rows("gain", [1.0, 2.0, 1.5, 1.49, 1.51]))
    score = scoring.score_claim(claim(), [run])
    (need,) = deciding.trials_needed(score)
    assert need.too_close
    assert "too close to call at this precision" in need.describe()


def test_ratios_are_counted_on_their_logs(tmp_path):
    run = store_run(tmp_path, claim(), rows("gain", [1.5, 1.9, 1.7], unit="x"))
    (need,) = deciding.trials_needed(scoring.score_claim(claim(), [run]))
    assert need.log_space and need.threshold == math.log(1.5)


def test_decided_claims_need_nothing(tmp_path):
    run = store_run(tmp_path, claim(), rows("gain", [3.0, 3.1, 2.9]))
    assert deciding.trials_needed(scoring.score_claim(claim(), [run])) == ()
