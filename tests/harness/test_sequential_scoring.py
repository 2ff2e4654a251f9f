"""A sequential run is scored on the confidence sequences it stopped on, not fixed-n intervals."""

from __future__ import annotations

import pytest
from scoring_helpers import claim, rows, store_run

from claimbench.harness import confseq, scoring

# Six trials whose t interval clears 1.5 (2.0 +- 2.571 * 0.35 / sqrt(6) = 2.0 +- 0.37) but whose
# confidence sequence (2.0 +- 4.82 * 0.35 / sqrt(6) = 2.0 +- 0.69) does not.
GAINS = [1.6, 2.4, 1.7, 2.3, 1.65, 2.35]


def _stopping(trials: int, **changes) -> dict:
    record = {
        "rule": "until-decided",
        "block_trials": 3,
        "max_trials": 20,
        "max_minutes": None,
        "level": 0.95,
        "num_trials": trials,
        "reason": "max-trials",
    }
    return {"stopping": {**record, **changes}}


def test_a_fixed_run_and_a_sequential_run_of_the_same_values_differ(tmp_path):
    fixed = store_run(tmp_path / "a", claim(), rows("gain", GAINS))
    sequential = store_run(tmp_path / "b", claim(), rows("gain", GAINS), extra_meta=_stopping(6))
    (f,) = scoring.score_claim(claim(), [fixed]).conditions
    (s,) = scoring.score_claim(claim(), [sequential]).conditions
    assert (f.method, f.status) == ("t", "holds")
    assert (s.method, s.status) == ("cs", "unclear")
    _, lo, hi = confseq.t_cs(__import__("numpy").array(GAINS))
    assert (s.ci_lo, s.ci_hi) == pytest.approx((lo, hi))


def test_ratios_are_sequenced_on_their_logs(tmp_path):
    run = store_run(
        tmp_path,
        claim(),
        rows("gain", [3.0, 3.1, 2.9, 3.05, 2.95, 3.0], unit="x"),
        extra_meta=_stopping(6),
    )
    (score,) = scoring.score_claim(claim(), [run]).conditions
    assert (score.method, score.status) == ("log-cs", "holds")


def test_pooled_counts_of_a_sequential_run_use_the_beta_binomial_sequence(tmp_path):
    share_claim = claim(conditions=[{"metric": "slo_attainment_pct", "op": ">=", "value": 90}])
    data = []
    for trial in range(6):
        data += [
            ("slo_attainment_pct", trial, 100.0, "cpu", "%"),
            ("slo_attainment_pct_successes", trial, 20, "cpu", "count"),
            ("slo_attainment_pct_total", trial, 20, "cpu", "count"),
        ]
    fixed = store_run(tmp_path / "a", share_claim, data)
    sequential = store_run(tmp_path / "b", share_claim, data, extra_meta=_stopping(6))
    (f,) = scoring.score_claim(share_claim, [fixed]).conditions
    (s,) = scoring.score_claim(share_claim, [sequential]).conditions
    assert f.method == "clopper-pearson" and s.method == "beta-binomial-cs"
    assert s.ci_lo < f.ci_lo  # the sequence pays for its freedom to stop
    lo, _ = confseq.share_cs(120, 120)
    assert s.ci_lo == pytest.approx(100 * lo)


@pytest.mark.parametrize(
    "changes",
    [
        {"rule": "peeked"},
        {"reason": "felt-right"},
        {"num_trials": 4},  # not the run's own trial count
        {"num_trials": "6"},
    ],
)
def test_a_malformed_stopping_record_is_listed_not_scored(tmp_path, changes):
    run = store_run(tmp_path, claim(), rows("gain", GAINS), extra_meta=_stopping(6, **changes))
    score = scoring.score_claim(claim(), [run])
    assert score.verdict == "not-run"
    assert "lacks provenance: stopping rule" in repr(score)
