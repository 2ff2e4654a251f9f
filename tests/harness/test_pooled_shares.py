"""A share with recorded counts is scored on the pooled counts (Clopper-Pearson), and a metric
that drifts across a run's trials is reported as a trend."""

from __future__ import annotations

import numpy as np
import pytest
from scoring_helpers import claim, rows, store_run

from claimbench.cli.claims import score_json
from claimbench.harness import intervals, scoring, trends

SLO = [{"metric": "slo_attainment_pct", "op": ">=", "value": 90}]


def share_rows(successes: list[int], total: int) -> list:
    """Per-trial shares in % with their counts recorded beside them."""
    shares = [100.0 * k / total for k in successes]
    return (
        rows("slo_attainment_pct", shares, unit="%")
        + rows("slo_attainment_pct_successes", successes, unit="count")
        + rows("slo_attainment_pct_total", [total] * len(successes), unit="count")
    )


def test_clopper_pearson_at_the_bounds_is_the_closed_form():
    # 0 of n: the upper end solves (1 - p)^n = alpha/2; n of n: the lower end solves p^n = alpha/2.
    lo, hi = intervals.clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10))
    lo, hi = intervals.clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 10))
    with pytest.raises(ValueError, match="11/10"):
        intervals.clopper_pearson(11, 10)


def test_all_successes_over_five_trials_is_evidence_not_a_constant(tmp_path):
    c = claim(conditions=SLO)
    perfect = store_run(tmp_path / "a", c, share_rows([16] * 5, 16))
    (cs,) = scoring.score_claim(c, [perfect]).conditions
    # 80 of 80: exact lower end 0.025^(1/80) = 95.5%, above 90.
    assert cs.method == "clopper-pearson" and cs.status == "holds"
    assert cs.ci_lo == pytest.approx(100 * 0.025 ** (1 / 80)) and cs.ci_hi == 100.0
    # One miss more can only weaken the evidence, never strengthen it.
    one_miss = store_run(tmp_path / "b", c, share_rows([16, 16, 16, 16, 15], 16))
    (worse,) = scoring.score_claim(c, [one_miss]).conditions
    assert worse.ci_lo < cs.ci_lo and worse.estimate == pytest.approx(100 * 79 / 80)


def test_without_counts_the_per_trial_shares_are_used(tmp_path):
    c = claim(conditions=SLO)
    run = store_run(tmp_path, c, rows("slo_attainment_pct", [100.0] * 5, unit="%"))
    (cs,) = scoring.score_claim(c, [run]).conditions
    assert (cs.method, cs.status) == ("constant", "unclear")
    # Counts that cannot be counts (a fraction, more successes than the whole) are ignored.
    bad = share_rows([16] * 5, 16)
    bad = [r if r[0] != "slo_attainment_pct_total" else (*r[:2], 15, *r[3:]) for r in bad]
    garbled = store_run(tmp_path / "g", c, bad)
    assert scoring.score_claim(c, [garbled]).conditions[0].method == "constant"


def test_a_monotone_run_is_a_trend_and_a_scattered_one_is_not():
    falling = trends.trend_of("rate", np.array([378.0, 201, 133, 95, 56]))
    assert falling is not None and falling.tau == pytest.approx(-1.0)
    assert falling.p_value == pytest.approx(2 / 120)  # exact: 2 of the 5! orders are monotone
    assert "falls across trials" in falling.describe()
    assert trends.trend_of("rate", np.array([300.0, 310, 295, 305, 301])) is None
    assert trends.trend_of("rate", np.array([4.0, 3, 2, 1])) is None  # 4 trials cannot reach 5%


def test_a_drifting_service_rate_is_a_warning_beside_the_verdict(tmp_path):
    c = claim()
    data = rows("gain", [2.0, 2.2, 2.1, 2.3, 2.05]) + rows(
        "saturation_tok_s", [378, 201, 133, 95, 56], unit="tok/s"
    )
    score = scoring.score_claim(c, [store_run(tmp_path, c, data)])
    assert score.verdict == "confirmed"  # a warning, not a verdict change
    (warning,) = score.trend_warnings
    assert warning.startswith("saturation_tok_s falls across trials")
    assert score_json.score_dict(tmp_path, score)["warnings"] == [warning]


@pytest.mark.parametrize(
    ("successes", "totals"),
    [
        ([0] * 5, [10] * 5),  # counts of 0 of 10 beside shares of 100%: they disagree
        ([2.0**60] * 5, [2.0**60] * 5),  # wholes past what a float counts exactly
    ],
)
def test_counts_that_do_not_stand_for_the_shares_decide_nothing(tmp_path, successes, totals):
    c = claim(conditions=SLO)
    data = (
        rows("slo_attainment_pct", [100.0] * 5, unit="%")
        + rows("slo_attainment_pct_successes", successes, unit="count")
        + rows("slo_attainment_pct_total", totals, unit="count")
    )
    run = store_run(tmp_path, c, data)
    (cs,) = scoring.score_claim(c, [run]).conditions
    # The per-trial shares decide (five identical shares: a constant, unclear), not the counts.
    assert (cs.method, cs.status) == ("constant", "unclear")


def test_an_infinite_count_keeps_the_run_from_being_scored(tmp_path):
    c = claim(conditions=SLO)
    total = ("slo_attainment_pct_total", 4)
    data = [
        (*r[:2], float("inf"), *r[3:]) if r[:2] == total else r for r in share_rows([16] * 5, 16)
    ]
    run = store_run(tmp_path, c, data)
    score = scoring.score_claim(c, [run])
    assert score.verdict == "not-run"
    ((reason, _),) = score.exclusion_counts().items()
    assert "non-finite values of slo_attainment_pct_total" in reason
