"""Calibration: scores by hand, the bootstrap over claims, and which claims count."""

from __future__ import annotations

import numpy as np
import pytest
from scoring_helpers import claim, rows, store_run

from claimbench.harness import calibration, scoring


def test_brier_and_log_by_hand():
    confidences = np.array([0.8, 0.6])
    outcomes = np.array([1, 0])
    # Brier: ((0.8 - 1)^2 + (0.6 - 0)^2) / 2 = (0.04 + 0.36) / 2 = 0.2
    assert calibration.brier_score(confidences, outcomes) == pytest.approx(0.2)
    # Log: (ln 0.8 + ln(1 - 0.6)) / 2 = (-0.223144 - 0.916291) / 2 = -0.569717
    assert calibration.log_score(confidences, outcomes) == pytest.approx(-0.569717, abs=1e-6)


def test_coin_baselines():
    half = np.full(4, 0.5)
    outcomes = np.array([1, 0, 1, 1])
    assert calibration.brier_score(half, outcomes) == calibration.COIN_BRIER == 0.25
    assert calibration.log_score(half, outcomes) == pytest.approx(calibration.COIN_LOG_SCORE)


def test_bootstrap_over_claims():
    # Two claims: resamples hold {0.8 right, 0.6 wrong} in proportions 1/4 (both 0.8: Brier
    # 0.04), 1/2 (one each: 0.2), 1/4 (both 0.6: 0.36), so the 95% interval is [0.04, 0.36].
    (lo, hi), (log_lo, log_hi) = calibration.bootstrap_over_claims(
        np.array([0.8, 0.6]), np.array([1, 0])
    )
    assert (lo, hi) == pytest.approx((0.04, 0.36))
    assert (log_lo, log_hi) == pytest.approx((np.log(0.4), np.log(0.8)))
    # Identical forecasts have no spread to resample.
    (lo, hi), _ = calibration.bootstrap_over_claims(np.full(5, 0.7), np.ones(5))
    assert lo == hi == pytest.approx(0.09)


def test_reliability_bins_by_hand():
    bins = calibration.reliability_bins(np.array([0.55, 0.58, 0.9, 0.7]), np.array([1, 0, 1, 0]))
    assert [(b.lo, b.hi, b.count) for b in bins] == [(0.5, 0.6, 2), (0.7, 0.8, 1), (0.9, 1.0, 1)]
    assert bins[0].mean_confidence == pytest.approx(0.565)
    assert [b.observed_rate for b in bins] == [0.5, 0.0, 1.0]


@pytest.mark.parametrize(
    ("confidences", "outcomes", "message"),
    [([0.5], [1, 0], "equal non-empty"), ([1.0], [1], r"in \(0, 1\)"), ([0.5], [2], "0 or 1")],
)
def test_forecast_checks(confidences, outcomes, message):
    with pytest.raises(ValueError, match=message):
        calibration.brier_score(np.array(confidences), np.array(outcomes))


def test_only_claims_decided_in_scope_count(tmp_path):
    claims = [
        claim(id="yes", confidence=0.8),
        claim(id="no", confidence=0.6),
        claim(id="unsure", confidence=0.9),  # too few trials: inconclusive
        claim(id="tpu-only", confidence=0.7, scope="tpu"),  # confirmed-looking cpu values
        claim(id="absent", confidence=0.75),
        claim(
            id="sum",  # decided by arithmetic alone: not a forecast of a measurement
            confidence=0.9,
            conditions=[{"metric": "ratio", "op": ">=", "value": 1.0, "basis": "analytic"}],
        ),
    ]
    runs = [
        store_run(tmp_path, claims[0], rows("gain", [2, 2.1, 2.2])),
        store_run(tmp_path, claims[1], rows("gain", [1, 1.1, 1.2])),
        store_run(tmp_path, claims[2], rows("gain", [2, 2.1])),
        store_run(tmp_path, claims[3], rows("gain", [2, 2.1, 2.2])),
        store_run(tmp_path, claims[5], [("ratio", 0, 1.5, "analytic")]),
    ]
    # Refuted by its analytic condition while its measured one holds: arithmetic decided it.
    claims.append(
        claim(
            id="refuted-by-sum",
            confidence=0.85,
            conditions=[
                {"metric": "ratio", "op": ">=", "value": 1.0, "basis": "analytic"},
                {"metric": "gain", "op": ">=", "value": 1.5},
            ],
        )
    )
    runs.append(
        store_run(
            tmp_path,
            claims[6],
            [("ratio", 0, 0.5, "analytic"), *rows("gain", [2, 2.1, 2.2])],
            hour=11,
        )
    )
    scores = scoring.score_claims(claims, runs)
    assert (scores[6].verdict, scores[6].decided) == ("refuted", True)
    assert not scores[6].decided_by_measurement
    assert scores[3].verdict == "indicative-only"
    assert scores[5].verdict == "confirmed"
    cal = calibration.calibration(scores)
    assert (cal.num_decided, cal.num_analytic_only) == (2, 2)
    assert cal.brier == pytest.approx(0.2)  # the hand case above: 0.8 confirmed, 0.6 refuted
    assert cal.log_score == pytest.approx(-0.569717, abs=1e-6)
    assert cal.brier_ci == pytest.approx((0.04, 0.36))
    assert [(b.lo, b.count, b.observed_rate) for b in cal.bins] == [(0.6, 1, 0.0), (0.8, 1, 1.0)]


def test_calibration_with_nothing_decided():
    cal = calibration.calibration([])
    assert (cal.num_decided, cal.brier, cal.brier_ci, cal.bins) == (0, None, None, ())
