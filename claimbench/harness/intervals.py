"""Confidence intervals for a condition's estimate from its per-trial values.

A Student-t interval on the trial values: mean +- t(n-1) * sd / sqrt(n). It is exact for normal
trials and close for the heavy-tailed and skewed values timing produces;
tests/harness/test_intervals.py simulates its coverage at 3 and 5 trials (a percentile
bootstrap of 3 trials covers about 75%).

Ratios (unit "x" with every value > 0) are estimated in log space: the t interval of the logs,
exponentiated. It targets the geometric mean (the median of a log-symmetric ratio), never
crosses zero, and treats 2x faster and 2x slower as equally far from 1.

Shares (a proportion of a whole: SLO attainment, an attack's accuracy, a waste or hit share) are
bounded, and so is their interval. A metric is a share when its unit is "share" (a fraction in
[0, 1]) or "%" and its name says what it is a share of (SHARE_WORDS); a percent change
(``ppl_delta_pct``, ``goodput_gain_pct``) is not, and keeps the t interval. A share's interval
is the t interval of the trial means' logits, mapped back ("logit-t"): it stays inside the
bounds, targets the logit-mean, and is asymmetric near a bound as a proportion's error is.
A trial mean at a bound (0% or 100%) has no logit; then the t interval is intersected with the
bounds ("t-bounded"), which keeps its coverage since the true share lies within them.

A share whose experiment also records its counts (``<metric>_successes`` and ``<metric>_total`` per
trial: requests within their SLO out of requests, probes classified right out of probes) is
estimated from the pooled counts instead: successes over total across the scored trials, with the
exact Clopper-Pearson interval ("clopper-pearson"), which never covers less than its level. Five
trials of 16/16 then give [95.5%, 100%]: an all-success run is evidence, not a constant.

Trials with one identical value each are not evidence of a zero-width interval (a copied
constant, or a measurement too coarse to vary): they get method "constant" and no interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats

CONFIDENCE_LEVEL = 0.95
RATIO_UNIT = "x"
# never: condition_scores.is_never_condition; the *cs methods: a sequential run (confseq.py)
METHODS = (
    "t",
    "log-t",
    "logit-t",
    "t-bounded",
    "clopper-pearson",
    "constant",
    "single",
    "never",
    "cs",
    "log-cs",
    "cs-bounded",
    "beta-binomial-cs",
)
SHARE_SCALE = {"share": 1.0, "%": 100.0}  # a share's unit -> the value of the whole
# Words in a "%" metric's name that make it a share of a whole rather than a change.
SHARE_WORDS = (
    "share",
    "attainment",
    "agreement",
    "acc_pct",
    "hit_rate",
    "retention",
    "waste",
    "touched",
    "skipped",
    "mfu",
)


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


def is_share(metric: str, unit: str, values: np.ndarray | None = None) -> bool:
    """Whether ``metric`` in ``unit`` is a share of a whole: unit "share", or unit "%" with a
    name from SHARE_WORDS; and, given its ``values``, all of them within the whole's bounds."""
    named = unit == "share" or (unit == "%" and any(word in metric.lower() for word in SHARE_WORDS))
    if not named or values is None:
        return named
    values = np.asarray(values, dtype=np.float64)
    return bool(np.all((values >= 0) & (values <= SHARE_SCALE[unit])))


def logit_t_bounds(shares: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(expit of the mean logit, lo, hi): the t interval of logit(shares) f64[..., n], every
    share strictly inside (0, 1), mapped back into (0, 1)."""
    centre, lo, hi = t_bounds(np.log(shares) - np.log1p(-shares))
    return special.expit(centre), special.expit(lo), special.expit(hi)


def share_interval(values: np.ndarray, scale: float) -> Interval:
    """The interval of per-trial shares ``values`` f64[n], n >= 2, not all equal, of a whole
    worth ``scale`` (1 or 100): logit-t, or t-bounded where a trial sits at a bound."""
    values = np.asarray(values, dtype=np.float64)
    if np.any(values < 0) or np.any(values > scale):
        raise ValueError(f"shares must lie in [0, {scale:g}], got {values.tolist()}")
    shares = values / scale
    if np.all((shares > 0) & (shares < 1)):
        centre, lo, hi = logit_t_bounds(shares)
        return Interval(float(centre) * scale, float(lo) * scale, float(hi) * scale, "logit-t")
    centre, lo, hi = t_bounds(values)
    return Interval(float(centre), max(float(lo), 0.0), min(float(hi), scale), "t-bounded")


def estimate_interval(values: np.ndarray, unit: str = "", *, share: bool = False) -> Interval:
    """The estimate and interval of per-trial ``values`` f64[n], n >= 1, of a metric in ``unit``
    (``share``: a share of a whole, unit "share" or "%", see is_share)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {values.shape}")
    if share and unit not in SHARE_SCALE:
        raise ValueError(f"a share's unit must be one of {sorted(SHARE_SCALE)}, got {unit!r}")
    if values.size == 1:
        return Interval(float(values[0]), None, None, "single")
    if np.ptp(values) == 0:
        return Interval(float(values[0]), None, None, "constant")
    if share:
        return share_interval(values, SHARE_SCALE[unit])
    if is_ratio(unit, values):
        centre, lo, hi = log_t_bounds(values)
        return Interval(float(centre), float(lo), float(hi), "log-t")
    centre, lo, hi = t_bounds(values)
    return Interval(float(centre), float(lo), float(hi), "t")


def clopper_pearson(
    successes: int, total: int, level: float = CONFIDENCE_LEVEL
) -> tuple[float, float]:
    """The exact two-sided ``level`` interval of a binomial proportion from ``successes`` out
    of ``total`` (0 <= successes <= total, total >= 1): beta quantiles, 0 and 1 at the ends."""
    if total < 1 or not 0 <= successes <= total:
        raise ValueError(f"need 0 <= successes <= total and total >= 1, got {successes}/{total}")
    alpha = 1.0 - level
    lo = (
        0.0
        if successes == 0
        else float(stats.beta.ppf(alpha / 2, successes, total - successes + 1))
    )
    hi = (
        1.0
        if successes == total
        else float(stats.beta.ppf(1 - alpha / 2, successes + 1, total - successes))
    )
    return lo, hi


def pooled_share_interval(successes: int, total: int, scale: float) -> Interval:
    """A share of a whole worth ``scale`` (1 or 100) from counts pooled over trials: the
    proportion and its Clopper-Pearson interval."""
    lo, hi = clopper_pearson(successes, total)
    return Interval(successes / total * scale, lo * scale, hi * scale, "clopper-pearson")
