"""Calibration: how well stated confidences matched outcomes, over the claims decided in scope.

Only claims decided by measurement count (ClaimScore.decided_by_measurement): decided on in-scope
evidence of each condition's basis, and confirmed with a measured condition among those holding,
or refuted by a measured condition. An indicative-only, inconclusive or not-run claim says
nothing about the forecaster, and neither does one decided by arithmetic alone (every condition
analytic, or refuted by an analytic condition): the author could have done the sum.

Brier and log scores come with a percentile bootstrap interval over claims (resampling whole
claims, the unit that was forecast), and a reliability table bins the claims by stated
confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from claimbench.harness.scoring import ClaimScore

COIN_BRIER = 0.25  # Brier score of always saying 0.5
COIN_LOG_SCORE = math.log(0.5)  # log score of always saying 0.5
CONFIDENCE_LEVEL = 0.95
NUM_RESAMPLES = 2000


@dataclass(frozen=True)
class ReliabilityBin:
    """Decided claims whose stated confidence fell in [lo, hi)."""

    lo: float
    hi: float
    count: int
    mean_confidence: float
    observed_rate: float  # fraction confirmed


@dataclass(frozen=True)
class Calibration:
    """Scores of the stated confidences over the claims decided in scope."""

    num_decided: int
    num_analytic_only: int  # claims decided by arithmetic alone: left out, counted
    brier: float | None  # mean (p - outcome)^2; lower is better, COIN_BRIER for always 0.5
    brier_ci: tuple[float, float] | None  # bootstrap over claims
    log_score: float | None  # mean ln(p if confirmed else 1 - p); higher is better, 0 perfect
    log_score_ci: tuple[float, float] | None
    bins: tuple[ReliabilityBin, ...]
    coin_brier: float = COIN_BRIER
    coin_log_score: float = COIN_LOG_SCORE


def _check_forecasts(confidences: np.ndarray, outcomes: np.ndarray) -> tuple[np.ndarray, ...]:
    confidences = np.asarray(confidences, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    if confidences.shape != outcomes.shape or confidences.ndim != 1 or confidences.size == 0:
        raise ValueError(
            f"need two equal non-empty 1-D arrays, got {confidences.shape} and {outcomes.shape}"
        )
    if not np.all((confidences > 0) & (confidences < 1)):
        raise ValueError(f"confidences must lie in (0, 1), got {confidences.tolist()}")
    if not np.all((outcomes == 0) | (outcomes == 1)):
        raise ValueError(f"outcomes must be 0 or 1, got {outcomes.tolist()}")
    return confidences, outcomes


def _brier(confidences: np.ndarray, outcomes: np.ndarray) -> np.ndarray:
    return np.mean((confidences - outcomes) ** 2, axis=-1)


def _log(confidences: np.ndarray, outcomes: np.ndarray) -> np.ndarray:
    return np.mean(np.log(np.where(outcomes == 1, confidences, 1.0 - confidences)), axis=-1)


def brier_score(confidences: np.ndarray, outcomes: np.ndarray) -> float:
    """Mean squared error of stated probabilities f64[n] against outcomes {0, 1}[n]."""
    return float(_brier(*_check_forecasts(confidences, outcomes)))


def log_score(confidences: np.ndarray, outcomes: np.ndarray) -> float:
    """Mean natural-log probability given to what happened (0 is perfect, ln 0.5 a coin)."""
    return float(_log(*_check_forecasts(confidences, outcomes)))


def bootstrap_over_claims(
    confidences: np.ndarray,
    outcomes: np.ndarray,
    *,
    seed: int = 0,
    num_resamples: int = NUM_RESAMPLES,
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Percentile CONFIDENCE_LEVEL intervals of (Brier, log score) from resampling claims.

    With a handful of claims the interval is wide, which is the point: it says how little a
    dozen forecasts can show.
    """
    confidences, outcomes = _check_forecasts(confidences, outcomes)
    picks = np.random.default_rng(seed).integers(
        0, confidences.size, (num_resamples, confidences.size)
    )
    tail = (1 - CONFIDENCE_LEVEL) / 2 * 100
    brier = np.percentile(_brier(confidences[picks], outcomes[picks]), [tail, 100 - tail])
    logs = np.percentile(_log(confidences[picks], outcomes[picks]), [tail, 100 - tail])
    return (float(brier[0]), float(brier[1])), (float(logs[0]), float(logs[1]))


def reliability_bins(
    confidences: np.ndarray, outcomes: np.ndarray, *, num_bins: int = 10
) -> tuple[ReliabilityBin, ...]:
    """Equal-width bins over [0, 1] of stated confidence; only non-empty bins are returned."""
    confidences, outcomes = _check_forecasts(confidences, outcomes)
    # Rounded first so a confidence on a bin edge (0.7 * 10 = 7.000000000000001) lands in the
    # bin it names whatever the float error.
    index = np.minimum(np.floor(np.round(confidences * num_bins, 9)).astype(int), num_bins - 1)
    bins = []
    for b in range(num_bins):
        mask = index == b
        if mask.any():
            bins.append(
                ReliabilityBin(
                    lo=b / num_bins,
                    hi=(b + 1) / num_bins,
                    count=int(mask.sum()),
                    mean_confidence=float(confidences[mask].mean()),
                    observed_rate=float(outcomes[mask].mean()),
                )
            )
    return tuple(bins)


def calibration(scores: list[ClaimScore], *, seed: int = 0) -> Calibration:
    """Brier, log score (each with a bootstrap interval over claims) and reliability bins over
    the claims decided by measurement (confirmed = 1)."""
    # A claim decided by arithmetic alone forecasts no measurement: the author could have done
    # the sum. It is left out (and counted), so calibration is about predictions of the world.
    arithmetic = [s for s in scores if s.decided and not s.decided_by_measurement]
    decided = [s for s in scores if s.decided_by_measurement]
    if not decided:
        return Calibration(0, len(arithmetic), None, None, None, None, ())
    confidences = np.array([s.claim.confidence for s in decided])
    outcomes = np.array([1.0 if s.verdict == "confirmed" else 0.0 for s in decided])
    brier_ci, log_ci = bootstrap_over_claims(confidences, outcomes, seed=seed)
    return Calibration(
        num_decided=len(decided),
        num_analytic_only=len(arithmetic),
        brier=brier_score(confidences, outcomes),
        brier_ci=brier_ci,
        log_score=log_score(confidences, outcomes),
        log_score_ci=log_ci,
        bins=reliability_bins(confidences, outcomes),
    )
