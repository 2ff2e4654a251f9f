"""Confidence intervals for a condition's estimate from its per-trial values.

A Student-t interval on the trial values: mean +- t(n-1) * sd / sqrt(n). It is exact for normal
trials and close for the heavy-tailed and skewed values timing produces; tests/test_intervals.py
simulates its coverage at 3 and 5 trials (a percentile bootstrap of 3 trials covers about 75%).

Ratios (unit "x" with every value > 0) are estimated in log space: the t interval of the logs,
exponentiated. It targets the geometric mean (the median of a log-symmetric ratio), never
crosses zero, and treats 2x faster and 2x slower as equally far from 1.

Trials with one identical value each are not evidence of a zero-width interval (a copied
constant, or a measurement too coarse to vary): they get method "constant" and no interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE_LEVEL = 0.95
RATIO_UNIT = "x"
METHODS = ("t", "log-t", "constant", "single", "never")  # never: scoring.is_never_condition


@dataclass(frozen=True)
class Interval:
    """An estimate and its CONFIDENCE_LEVEL interval (None when there is no honest one)."""

    estimate: float  # mean (t), geometric mean (log-t), or the one value (constant, single)
    lo: float | None
    hi: float | None
    method: str  # one of METHODS


def t_quantile(num_trials: int, level: float = CONFIDENCE_LEVEL) -> float:
    """The two-sided ``level`` Student-t quantile with ``num_trials - 1`` degrees of freedom."""
    if num_trials < 2:
        raise ValueError(f"a t interval needs at least 2 trials, got {num_trials}")
    return float(stats.t.ppf(0.5 + level / 2, num_trials - 1))


def t_bounds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi) of the t interval over the last axis of ``values`` f64[..., n], n >= 2.

    Vectorized so a coverage simulation scores many samples at once.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-1]
    mean = values.mean(axis=-1)
    half = t_quantile(n) * values.std(axis=-1, ddof=1) / np.sqrt(n)
    return mean, mean - half, mean + half


def log_t_bounds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(geometric mean, lo, hi): the t interval of log(values) f64[..., n], exponentiated."""
    centre, lo, hi = t_bounds(np.log(values))
    return np.exp(centre), np.exp(lo), np.exp(hi)


def is_ratio(unit: str, values: np.ndarray) -> bool:
    """Whether ``values`` are a ratio estimated in log space: unit "x", every value > 0."""
    return unit == RATIO_UNIT and bool(np.all(np.asarray(values) > 0))


def estimate_interval(values: np.ndarray, unit: str = "") -> Interval:
    """The estimate and interval of per-trial ``values`` f64[n], n >= 1, of a metric in ``unit``."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {values.shape}")
    if values.size == 1:
        return Interval(float(values[0]), None, None, "single")
    if np.ptp(values) == 0:
        return Interval(float(values[0]), None, None, "constant")
    if is_ratio(unit, values):
        centre, lo, hi = log_t_bounds(values)
        return Interval(float(centre), float(lo), float(hi), "log-t")
    centre, lo, hi = t_bounds(values)
    return Interval(float(centre), float(lo), float(hi), "t")
