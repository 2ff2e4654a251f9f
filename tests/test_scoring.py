"""Scoring: hand-computed cases for every verdict path, bootstrap CIs, Brier and log scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from claimbench.harness import scoring
from claimbench.harness.claims import Claim, Condition


def claim(scope: str = "any", conditions=None, confidence: float = 0.8, id: str = "c") -> Claim:
    conditions = conditions or [{"metric": "speedup", "op": ">=", "value": 1.5}]
    return Claim.model_validate(
        {
            "id": id,
            "part": 1,
            "title": "t",
            "statement": "s",
            "confidence": confidence,
            "scope": scope,
            "prediction": conditions,
            "refuted_if": "r",
        }
    )


def rows(metric: str, values, evidence: str = "cpu"):
    return [(metric, trial, value, evidence) for trial, value in enumerate(values)]


TWO = [
    {"metric": "speedup", "op": ">=", "value": 1.5},
    {"metric": "mismatch", "op": "<=", "value": 0},
]


# --- bootstrap -------------------------------------------------------------------------------


def test_bootstrap_of_constant_values_is_a_point():
    assert scoring.bootstrap_ci(np.array([2.0, 2.0, 2.0])) == (2.0, 2.0)


def test_bootstrap_of_one_value():
    assert scoring.bootstrap_ci(np.array([3.5])) == (3.5, 3.5)


def test_bootstrap_two_points_spans_their_range():
    # Resample means of [0, 1] with n=2 are 0 (p=1/4), 0.5 (p=1/2), 1 (p=1/4): the 2.5th and
    # 97.5th percentiles of 2000 such draws are 0 and 1.
    assert scoring.bootstrap_ci(np.array([0.0, 1.0])) == (0.0, 1.0)


def test_bootstrap_is_seeded_bounded_and_contains_the_mean():
    values = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    lo, hi = scoring.bootstrap_ci(values, seed=3)
    assert (lo, hi) == scoring.bootstrap_ci(values, seed=3)
    assert values.min() <= lo < values.mean() < hi <= values.max()


def test_bootstrap_width_matches_the_normal_approximation():
    # For many trials the percentile CI of a mean approaches mean +- 1.96 * sd / sqrt(n).
    values = np.random.default_rng(0).normal(1.0, 0.1, size=400)
    lo, hi = scoring.bootstrap_ci(values)
    expected = 2 * 1.96 * values.std() / np.sqrt(values.size)
    assert hi - lo == pytest.approx(expected, rel=0.15)
    assert (lo + hi) / 2 == pytest.approx(values.mean(), abs=0.003)


def test_bootstrap_rejects_empty():
    with pytest.raises(ValueError, match="non-empty 1-D"):
        scoring.bootstrap_ci(np.array([]))


def test_interval_status_by_op():
    ge = Condition(metric="m", op=">=", value=1.0)
    assert scoring.interval_status(ge, 1.0, 2.0) == "holds"  # touching the threshold is in
    assert scoring.interval_status(ge, 0.2, 0.9) == "fails"
    assert scoring.interval_status(ge, 0.9, 1.1) == "unclear"
    lt = Condition(metric="m", op="<", value=10.0)
    assert scoring.interval_status(lt, 3.0, 9.9) == "holds"
    assert scoring.interval_status(lt, 10.0, 12.0) == "fails"  # 10 is not < 10
    gt = Condition(metric="m", op=">", value=0.0)
    assert scoring.interval_status(gt, 0.0, 1.0) == "unclear"
    le = Condition(metric="m", op="<=", value=0.0)
    assert scoring.interval_status(le, 0.0, 0.0) == "holds"


def test_trial_values_average_within_a_trial(make_run):
    run = make_run(
        "20261129T100000Z-c-0000",
        "c",
        [("m", 0, 1.0, "cpu"), ("m", 0, 3.0, "cpu"), ("m", 1, 5.0, "cpu"), ("x", 0, 9, "cpu")],
    )
    assert scoring.trial_values(run.measurements, "m").tolist() == [2.0, 5.0]


# --- verdicts --------------------------------------------------------------------------------


def test_confirmed(make_run):
    run = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [2.0, 2.1, 1.9]))
    score = scoring.score_claim(claim(), [run])
    assert score.verdict == "confirmed"
    (cs,) = score.headline.conditions
    assert cs.estimate == pytest.approx(2.0)
    assert 1.9 <= cs.ci_lo <= cs.ci_hi <= 2.1
    assert cs.status == "holds" and cs.num_trials == 3 and cs.evidence == "cpu"


def test_refuted(make_run):
    run = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [1.0, 1.1, 0.9]))
    assert scoring.score_claim(claim(), [run]).verdict == "refuted"


def test_inconclusive_when_ci_straddles(make_run):
    # Mean 1.5 with values on both sides of the 1.5 threshold: the CI must straddle it.
    run = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [1.0, 2.0, 1.4, 1.6]))
    score = scoring.score_claim(claim(), [run])
    assert score.headline.conditions[0].status == "unclear"
    assert score.verdict == "inconclusive"


def test_inconclusive_with_fewer_than_three_trials(make_run):
    run = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [2.0, 2.1]))
    score = scoring.score_claim(claim(), [run])
    assert score.headline.conditions[0].status == "too-few-trials"
    assert score.verdict == "inconclusive"


def test_inconclusive_when_a_metric_is_missing(make_run):
    run = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [2.0, 2.1, 2.2]))
    score = scoring.score_claim(claim(conditions=TWO), [run])
    assert [c.status for c in score.headline.conditions] == ["holds", "missing"]
    assert score.headline.conditions[1].estimate is None
    assert score.verdict == "inconclusive"


def test_refuted_when_one_of_two_conditions_fails(make_run):
    data = rows("speedup", [2.0, 2.1, 2.2]) + rows("mismatch", [1, 2, 1])
    run = make_run("20261129T100000Z-c-0000", "c", data)
    score = scoring.score_claim(claim(conditions=TWO), [run])
    assert [c.status for c in score.headline.conditions] == ["holds", "fails"]
    assert score.verdict == "refuted"


def test_not_run(make_run):
    other = make_run("20261129T100000Z-d-0000", "d", rows("speedup", [2.0, 2.0, 2.0]))
    score = scoring.score_claim(claim(), [other])
    assert (score.verdict, score.headline, score.groups) == ("not-run", None, ())


def test_indicative_only_for_tpu_claim_measured_on_cpu(make_run):
    run = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [2.0, 2.0, 2.0]))
    score = scoring.score_claim(claim(scope="tpu"), [run])
    assert score.verdict == "indicative-only"
    assert score.headline is None
    (group,) = score.groups
    assert (group.evidence, group.in_scope, group.verdict) == ("cpu", False, "confirmed")


def test_accelerator_scope_takes_gpu_but_not_cpu(make_run):
    cpu = make_run("20261129T110000Z-c-0000", "c", rows("speedup", [1.0, 1.0, 1.0]))
    gpu = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [2.0, 2.0, 2.0], "gpu"))
    score = scoring.score_claim(claim(scope="accelerator"), [cpu, gpu])
    assert score.verdict == "confirmed"
    assert score.headline.evidence == "gpu"
    assert scoring.score_claim(claim(scope="accelerator"), [cpu]).verdict == "indicative-only"


def test_tpu_evidence_decides_tpu_claim(make_run):
    cpu = make_run("20261129T110000Z-c-0000", "c", rows("speedup", [2.0, 2.0, 2.0]))
    tpu = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [1.0, 1.1, 1.0], "tpu"))
    score = scoring.score_claim(claim(scope="tpu"), [cpu, tpu])
    assert (score.verdict, score.headline.evidence) == ("refuted", "tpu")
    assert [g.evidence for g in score.groups] == ["tpu", "cpu"]


def test_analytic_counts_for_any_scope(make_run):
    run = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [2.0, 2.0, 2.0], "analytic"))
    score = scoring.score_claim(claim(scope="tpu"), [run])
    assert (score.verdict, score.headline.evidence) == ("confirmed", "analytic")


def test_measured_preferred_over_newer_analytic(make_run):
    measured = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [1.0, 1.0, 1.0]))
    analytic = make_run(
        "20261129T120000Z-c-0000", "c", rows("speedup", [2.0, 2.0, 2.0], "analytic")
    )
    score = scoring.score_claim(claim(), [analytic, measured])
    assert (score.verdict, score.headline.evidence) == ("refuted", "cpu")


def test_most_recent_measured_run_wins(make_run):
    old_cpu = make_run("20261129T100000Z-c-0000", "c", rows("speedup", [1.0, 1.0, 1.0]))
    new_cpu = make_run("20261129T120000Z-c-0000", "c", rows("speedup", [2.0, 2.0, 2.0]))
    gpu = make_run("20261129T110000Z-c-0000", "c", rows("speedup", [1.0, 1.0, 1.0], "gpu"))
    score = scoring.score_claim(claim(), [new_cpu, gpu, old_cpu])
    assert score.verdict == "confirmed"
    assert score.headline.run_id == "20261129T120000Z-c-0000"
    # One group per class, each from its latest run.
    assert {g.evidence: g.run_id[9:13] for g in score.groups} == {"cpu": "1200", "gpu": "1100"}


def test_measured_group_falls_back_on_same_runs_analytic_values(make_run):
    data = rows("speedup", [2.0, 2.1, 2.2]) + rows("mismatch", [0, 0, 0], "analytic")
    run = make_run("20261129T100000Z-c-0000", "c", data)
    score = scoring.score_claim(claim(conditions=TWO), [run])
    assert score.headline.evidence == "cpu"
    assert [c.evidence for c in score.headline.conditions] == ["cpu", "analytic"]
    assert score.verdict == "confirmed"


def test_side_metrics_are_not_evidence(make_run):
    data = rows("speedup", [2.0, 2.0, 2.0]) + rows("weight_bytes", [8, 8, 8], "analytic")
    score = scoring.score_claim(
        claim(scope="tpu"), [make_run("20261129T100000Z-c-0000", "c", data)]
    )
    assert [g.evidence for g in score.groups] == ["cpu"]
    assert score.verdict == "indicative-only"


def test_score_claims_keeps_file_order_and_counts(make_run):
    claims = [claim(id="a"), claim(id="b"), claim(id="c", scope="tpu")]
    runs = [
        make_run("20261129T100000Z-a-0000", "a", rows("speedup", [2, 2, 2])),
        make_run("20261129T100000Z-c-0000", "c", rows("speedup", [2, 2, 2])),
    ]
    scores = scoring.score_claims(claims, runs)
    assert [s.verdict for s in scores] == ["confirmed", "not-run", "indicative-only"]
    counts = scoring.verdict_counts(scores)
    assert counts == {
        "confirmed": 1,
        "refuted": 0,
        "inconclusive": 0,
        "indicative-only": 1,
        "not-run": 1,
    }


def test_scores_frame(make_run):
    claims = [claim(id="a", conditions=TWO), claim(id="b")]
    runs = [make_run("20261129T100000Z-a-0000", "a", rows("speedup", [2, 2, 2]))]
    frame = scoring.scores_frame(scoring.score_claims(claims, runs))
    assert frame[["claim_id", "metric", "condition_status"]].values.tolist() == [
        ["a", "speedup", "holds"],
        ["a", "mismatch", "missing"],
        ["b", "speedup", "missing"],
    ]
    assert frame["headline"].tolist() == [True, True, False]
    assert frame["verdict"].tolist() == ["inconclusive", "inconclusive", "not-run"]
    assert math.isnan(frame.loc[2, "estimate"])


# --- calibration -----------------------------------------------------------------------------


def test_brier_and_log_by_hand():
    confidences = np.array([0.8, 0.6])
    outcomes = np.array([1, 0])
    # Brier: ((0.8 - 1)^2 + (0.6 - 0)^2) / 2 = (0.04 + 0.36) / 2 = 0.2
    assert scoring.brier_score(confidences, outcomes) == pytest.approx(0.2)
    # Log: (ln 0.8 + ln(1 - 0.6)) / 2 = (-0.223144 - 0.916291) / 2 = -0.569717
    assert scoring.log_score(confidences, outcomes) == pytest.approx(-0.569717, abs=1e-6)


def test_coin_baselines():
    half = np.full(4, 0.5)
    outcomes = np.array([1, 0, 1, 1])
    assert scoring.brier_score(half, outcomes) == scoring.COIN_BRIER == 0.25
    assert scoring.log_score(half, outcomes) == pytest.approx(scoring.COIN_LOG_SCORE)


def test_reliability_bins_by_hand():
    bins = scoring.reliability_bins(np.array([0.55, 0.58, 0.9, 0.7]), np.array([1, 0, 1, 0]))
    assert [(b.lo, b.hi, b.count) for b in bins] == [(0.5, 0.6, 2), (0.7, 0.8, 1), (0.9, 1.0, 1)]
    assert bins[0].mean_confidence == pytest.approx(0.565)
    assert [b.observed_rate for b in bins] == [0.5, 0.0, 1.0]


@pytest.mark.parametrize(
    ("confidences", "outcomes", "message"),
    [
        ([0.5], [1, 0], "equal non-empty"),
        ([1.0], [1], r"in \(0, 1\)"),
        ([0.5], [2], "0 or 1"),
    ],
)
def test_forecast_checks(confidences, outcomes, message):
    with pytest.raises(ValueError, match=message):
        scoring.brier_score(np.array(confidences), np.array(outcomes))


def test_calibration_over_decided_claims_only(make_run):
    claims = [
        claim(id="yes", confidence=0.8),
        claim(id="no", confidence=0.6),
        claim(id="unsure", confidence=0.9),
        claim(id="absent", confidence=0.7),
    ]
    runs = [
        make_run("20261129T100000Z-yes-0000", "yes", rows("speedup", [2, 2, 2])),
        make_run("20261129T100000Z-no-0000", "no", rows("speedup", [1, 1, 1])),
        make_run("20261129T100000Z-unsure-0000", "unsure", rows("speedup", [2, 2])),
    ]
    cal = scoring.calibration(scoring.score_claims(claims, runs))
    assert cal.num_decided == 2
    assert cal.brier == pytest.approx(0.2)  # the hand case above: 0.8 confirmed, 0.6 refuted
    assert cal.log_score == pytest.approx(-0.569717, abs=1e-6)
    assert [(b.lo, b.count, b.observed_rate) for b in cal.bins] == [(0.6, 1, 0.0), (0.8, 1, 1.0)]


def test_calibration_with_nothing_decided():
    cal = scoring.calibration([])
    assert (cal.num_decided, cal.brier, cal.log_score, cal.bins) == (0, None, None, ())


def test_format_value():
    assert scoring.format_value(1.2345) == "1.23"
    assert scoring.format_value(123456.7) == "123,457"
    assert scoring.format_value(None) == "-"
