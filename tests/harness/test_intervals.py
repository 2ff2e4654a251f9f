"""Intervals: simulated coverage at the trial counts runs use, constants, ratios in log space."""

from __future__ import annotations

import numpy as np
import pytest

from claimbench.harness import intervals

NUM_SAMPLES = 20_000  # coverage standard error ~0.0015 at 0.95
MU = 1.0


def _draw(kind: str, rng: np.random.Generator, n: int) -> tuple[np.ndarray, float]:
    """NUM_SAMPLES samples f64[NUM_SAMPLES, n] and the mean they are drawn around."""
    shape = (NUM_SAMPLES, n)
    if kind == "normal":
        return rng.normal(MU, 0.3, shape), MU
    if kind == "student-t3":
        return MU + 0.3 * rng.standard_t(3, shape), MU  # heavy tails, finite variance
    # lognormal sigma 0.25: timing-like right skew; its mean is exp(mu + sigma^2 / 2).
    return rng.lognormal(np.log(MU), 0.25, shape), MU * np.exp(0.25**2 / 2)


def _coverage(lo: np.ndarray, hi: np.ndarray, target: float) -> float:
    return float(np.mean((lo <= target) & (target <= hi)))


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("kind", ["normal", "student-t3", "lognormal"])
def test_t_interval_covers_the_mean(kind, n):
    seed = ["normal", "student-t3", "lognormal"].index(kind) * 10 + n
    values, mean = _draw(kind, np.random.default_rng(seed), n)
    _, lo, hi = intervals.t_bounds(values)
    assert _coverage(lo, hi, mean) >= 0.93


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("log_noise", ["normal", "student-t3"])
def test_log_t_interval_covers_the_geometric_mean(log_noise, n):
    # exp(MU_log + noise) with noise symmetric about 0: the geometric mean and the median are
    # both exp(MU_log), which is what the log-space interval estimates.
    rng = np.random.default_rng(7 + n)
    shape = (NUM_SAMPLES, n)
    noise = rng.normal(0, 0.25, shape) if log_noise == "normal" else 0.25 * rng.standard_t(3, shape)
    values = 2.0 * np.exp(noise)
    _, lo, hi = intervals.log_t_bounds(values)
    assert _coverage(lo, hi, 2.0) >= 0.93
    assert np.all(lo > 0)


def test_the_simulation_catches_an_undercovering_interval():
    # The normal-quantile interval (1.96 sd / sqrt(n)) is what a percentile bootstrap
    # approximates; at 3 trials it covers ~0.81, so the coverage tests above can fail.
    values, mean = _draw("normal", np.random.default_rng(1), 3)
    centre = values.mean(axis=1)
    half = 1.96 * values.std(axis=1, ddof=1) / np.sqrt(3)
    assert _coverage(centre - half, centre + half, mean) < 0.85


def test_t_quantile_by_table():
    # Student-t 97.5% quantiles: 4.303 (2 df), 2.776 (4 df), 2.262 (9 df).
    assert intervals.t_quantile(3) == pytest.approx(4.303, abs=1e-3)
    assert intervals.t_quantile(5) == pytest.approx(2.776, abs=1e-3)
    assert intervals.t_quantile(10) == pytest.approx(2.262, abs=1e-3)
    with pytest.raises(ValueError, match="at least 2 trials"):
        intervals.t_quantile(1)


def test_t_interval_by_hand():
    # mean 2, sd 1 (values 1, 2, 3), n 3: 2 +- 4.303 / sqrt(3) = 2 +- 2.484.
    got = intervals.estimate_interval(np.array([1.0, 2.0, 3.0]), "tok/s")
    assert got.method == "t" and got.estimate == pytest.approx(2.0)
    assert (got.lo, got.hi) == pytest.approx((2.0 - 2.4843, 2.0 + 2.4843), abs=1e-3)


def test_ratio_is_estimated_in_log_space():
    # logs of 1, 2, 4 are 0, ln2, 2 ln2: mean ln2, sd ln2 -> geometric mean 2, bounds
    # 2 * exp(+-4.303 ln2 / sqrt(3)) = 2 * 2^(+-2.484).
    got = intervals.estimate_interval(np.array([1.0, 2.0, 4.0]), "x")
    assert got.method == "log-t" and got.estimate == pytest.approx(2.0)
    assert (got.lo, got.hi) == pytest.approx((2.0 * 2**-2.4843, 2.0 * 2**2.4843), rel=1e-3)
    # A ratio with a non-positive value has no log: the linear interval.
    assert intervals.estimate_interval(np.array([0.0, 1.0, 2.0]), "x").method == "t"


def test_constant_values_have_no_interval():
    got = intervals.estimate_interval(np.array([1.9, 1.9, 1.9]), "x")
    assert (got.estimate, got.lo, got.hi, got.method) == (1.9, None, None, "constant")
    assert intervals.estimate_interval(np.array([3.5])).method == "single"
    with pytest.raises(ValueError, match="non-empty 1-D"):
        intervals.estimate_interval(np.array([]))


# --- shares ----------------------------------------------------------------------------------


def test_share_interval_stays_within_its_bounds():
    # Premium SLO attainment of 99.9, 91 and 99.5%: the t interval reaches past 100%
    # (96.8 +- 4.303 * 4.98 / sqrt(3) = [84.4, 109.2]); a share's interval cannot.
    values = np.array([99.9, 91.0, 99.5])
    _, t_lo, t_hi = intervals.t_bounds(values)
    assert t_hi > 100.0
    got = intervals.estimate_interval(values, "%", share=True)
    assert got.method == "logit-t" and 0.0 < got.lo < got.estimate < got.hi < 100.0
    # A trial at the bound has no logit: the t interval, cut at [0, 100].
    at_bound = intervals.estimate_interval(np.array([100.0, 92.0, 100.0]), "%", share=True)
    assert at_bound.method == "t-bounded" and at_bound.hi == 100.0 and 0.0 <= at_bound.lo < 92.0
    low = intervals.estimate_interval(np.array([0.0, 3.0, 0.5]), "%", share=True)
    assert low.lo == 0.0 and low.hi <= 100.0
    # Unit "share" is a fraction of 1.
    frac = intervals.estimate_interval(np.array([0.2, 0.4, 0.3]), "share", share=True)
    assert frac.method == "logit-t" and 0.0 < frac.lo < frac.hi < 1.0


@pytest.mark.parametrize("n", [3, 5])
def test_logit_t_interval_covers_the_logit_mean(n):
    # Trial shares expit(logit(0.9) + noise): the logit-mean maps back to 0.9, which the
    # logit-space interval estimates, and every bound stays inside (0, 1).
    rng = np.random.default_rng(11 + n)
    logits = np.log(9.0) + rng.normal(0, 0.5, (NUM_SAMPLES, n))
    shares = 1 / (1 + np.exp(-logits))
    _, lo, hi = intervals.logit_t_bounds(shares)
    assert _coverage(lo, hi, 0.9) >= 0.93
    assert np.all((lo > 0) & (hi < 1))


def test_which_metrics_are_shares():
    assert intervals.is_share("premium_slo_attainment_pct", "%")
    assert intervals.is_share("salted_attack_acc_pct", "%")
    assert intervals.is_share("steps_running_all_layers_b32", "share")
    # Percent changes are not shares of a whole, and neither is a "share" past its bounds.
    assert not intervals.is_share("ppl_delta_pct", "%")
    assert not intervals.is_share("goodput_gain_pct", "%")
    assert not intervals.is_share("host_share_pct", "%", np.array([50.0, 120.0]))
    with pytest.raises(ValueError, match="shares must lie in"):
        intervals.share_interval(np.array([50.0, 101.0]), 100.0)
