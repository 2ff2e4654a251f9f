"""Anytime-valid confidence sequences: intervals that may be looked at after every trial.

A fixed-n interval (harness/intervals.py) covers the truth with probability 0.95 at the one trial
count chosen in advance. Looked at after every trial and stopped as soon as it clears a
threshold, it is wrong far more often: the peeks are many chances to catch a lucky streak. A
confidence sequence covers the truth at every trial count at once, with probability >= 0.95, so
a run may stop whenever it likes (`run --until-decided`) and keep the stated coverage.

Two sequences, each the set of values a nonnegative test martingale has not rejected at level
alpha (Ville's inequality: P(a test martingale ever reaches 1/alpha) <= alpha):

- Trial means (timings, ratios in log space, percent changes): the scale-invariant Gaussian
  mixture of Lai (1976) and Perez-Ortiz, Lardy, de Heide and Grunwald (2024). The Bayes factor of
  the one-sample t statistic with a N(0, g) prior on the standardised effect and the right-Haar
  prior 1/sigma on the unknown spread,

      BF_n(mu0) = (1 + n g)^(-1/2) * ((1 + t^2/nu) / (1 + t^2/(nu (1 + n g))))^((nu + 1) / 2),

  t = (mean - mu0) / (s / sqrt(n)), nu = n - 1, is a test martingale under mu = mu0 in the
  filtration of the scale-invariant statistic, for i.i.d. normal trials (the same assumption the
  fixed-n t interval makes). The sequence is {mu0 : BF_n(mu0) < 1/alpha}, which solves in closed
  form to mean +- c_n * s / sqrt(n) (``t_cs_factor``). It needs n >= 2.
- Pooled counts (a share: SLO attainment, attack accuracy): Robbins' beta-binomial mixture. The
  Beta(1/2, 1/2) mixture of Bernoulli likelihoods over the likelihood at p0 is a test martingale
  under p = p0 in the filtration of the individual outcomes, so stopping at a trial boundary is
  a stopping time. The sequence {p0 : mixture / likelihood(p0) < 1/alpha} is an interval (the
  log ratio is convex in p0), found by bisection on each side of the observed share.

G_MIXTURE trades early against late width: with g = 2 the sequence can first exclude anything
at 4 trials (half-width 5.8 s/sqrt(n) at 5, 3.9 at 10, 3.5 at 20, against the fixed-n t's 2.8,
2.3, 2.1), and a smaller g is narrower only past about 30 trials, beyond `--max-trials`' range.
tests/harness/test_confseq.py measures the error rate over 1,000 simulated streams against the
fixed-n t interval peeked at every trial (benchmarks/sequential_error_rates.py prints both).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from claimbench.harness.intervals import SHARE_SCALE, Interval, is_ratio

CONFIDENCE_LEVEL = 0.95
G_MIXTURE = 2.0  # prior variance of the standardised effect in the Gaussian mixture
BETA_PRIOR = 0.5  # Beta(a, a) mixture over the share (Jeffreys)


def t_cs_factor(num_trials: int, level: float = CONFIDENCE_LEVEL, g: float = G_MIXTURE) -> float:
    """c_n such that the sequence after ``num_trials`` trials is mean +- c_n * s / sqrt(n).

    inf when the martingale cannot yet reject any mean (too few trials for ``level``).
    """
    if num_trials < 2:
        raise ValueError(f"a confidence sequence needs at least 2 trials, got {num_trials}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not g > 0:
        raise ValueError(f"g must be > 0, got {g}")
    n = num_trials
    nu = n - 1
    alpha = 1 - level
    spread = 1 + n * g
    # BF = spread^(-1/2) * ((1 + a) / (1 + a / spread))^((nu + 1) / 2) with a = t^2 / nu,
    # increasing in a from spread^(-1/2) towards spread^(nu / 2). Reject where BF >= 1/alpha.
    k = (spread / alpha**2) ** (1 / (nu + 1))
    if k >= spread:
        return math.inf
    a = (k - 1) / (1 - k / spread)
    return math.sqrt(nu * a)


def t_cs(values: np.ndarray, level: float = CONFIDENCE_LEVEL) -> tuple[float, float, float]:
    """(mean, lo, hi) of the Gaussian-mixture confidence sequence over trial values f64[n]."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {values.shape}")
    n = values.size
    mean = float(values.mean()) if n else math.nan
    half = t_cs_factor(n, level) * float(values.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def t_cs_bounds(values: np.ndarray, level: float = CONFIDENCE_LEVEL) -> tuple[np.ndarray, ...]:
    """(mean, lo, hi) over the last axis of ``values`` f64[..., n]: many streams at once."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-1]
    mean = values.mean(axis=-1)
    half = t_cs_factor(n, level) * values.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def _log_mixture_ratio(successes: int, trials: int, p0: float, a: float) -> float:
    """log of the Beta(a, a) mixture likelihood over the Bernoulli likelihood at ``p0``."""
    failures = trials - successes
    log_mixture = special.betaln(successes + a, failures + a) - special.betaln(a, a)
    log_null = special.xlogy(successes, p0) + special.xlog1py(failures, -p0)
    return float(log_mixture - log_null)


def share_cs(
    successes: int, trials: int, level: float = CONFIDENCE_LEVEL, a: float = BETA_PRIOR
) -> tuple[float, float]:
    """(lo, hi) of the beta-binomial mixture confidence sequence for a share from pooled counts.

    ``successes`` of ``trials`` outcomes observed so far (any stopping rule at trial boundaries).
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    threshold = math.log(1 / (1 - level))
    if trials == 0:
        return 0.0, 1.0
    share = successes / trials

    def rejected(p0: float) -> bool:
        return _log_mixture_ratio(successes, trials, p0, a) >= threshold

    def edge(inside: float, outside: float) -> float:
        """The boundary between an accepted ``inside`` and a rejected ``outside`` point."""
        if not rejected(outside):
            return outside
        for _ in range(60):
            mid = (inside + outside) / 2
            if rejected(mid):
                outside = mid
            else:
                inside = mid
        return inside

    return edge(share, 0.0), edge(share, 1.0)


def sequence_interval(values: np.ndarray, unit: str = "", *, share: bool = False) -> Interval:
    """The confidence sequence of a sequential run's per-trial ``values`` f64[n], the analogue
    of intervals.estimate_interval: ratios on their logs ("log-cs"), shares cut at their bounds
    ("cs-bounded"), anything else as it is ("cs"); one value or a constant has none."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {values.shape}")
    if values.size == 1:
        return Interval(float(values[0]), None, None, "single")
    if np.ptp(values) == 0:
        return Interval(float(values[0]), None, None, "constant")
    if share:
        centre, lo, hi = t_cs(values)
        scale = SHARE_SCALE[unit]
        return Interval(centre, max(lo, 0.0), min(hi, scale), "cs-bounded")
    if is_ratio(unit, values):
        centre, lo, hi = t_cs(np.log(values))
        return Interval(math.exp(centre), math.exp(lo), math.exp(hi), "log-cs")
    centre, lo, hi = t_cs(values)
    return Interval(centre, lo, hi, "cs")


def pooled_share_sequence(successes: int, total: int, scale: float) -> Interval:
    """A share of a whole worth ``scale`` from counts pooled over a sequential run's trials:
    the proportion and its beta-binomial confidence sequence."""
    if total < 1:
        raise ValueError(f"need total >= 1, got {total}")
    lo, hi = share_cs(successes, total)
    return Interval(successes / total * scale, lo * scale, hi * scale, "beta-binomial-cs")
