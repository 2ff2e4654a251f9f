"""Confidence sequences: known answers, and error rates under stopping after every trial."""

from __future__ import annotations

import functools
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from claimbench.harness import confseq, intervals

ROOT = Path(__file__).resolve().parents[2]
STREAMS = 1000  # each stream a run stopped by the rule; error standard error ~0.007 at 0.05
ALPHA = 1 - confseq.CONFIDENCE_LEVEL


def _simulation():
    spec = importlib.util.spec_from_file_location(
        "sequential_error_rates", ROOT / "benchmarks" / "sequential_error_rates.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_factor_matches_the_bayes_factor_at_its_boundary():
    # At mean +- c_n s / sqrt(n) the mixture martingale equals 1 / alpha exactly.
    for n in (4, 5, 10, 20):
        c = confseq.t_cs_factor(n)
        nu, g = n - 1, confseq.G_MIXTURE
        t2 = c * c
        bf = (1 + n * g) ** -0.5 * ((1 + t2 / nu) / (1 + t2 / (nu * (1 + n * g)))) ** ((nu + 1) / 2)
        assert bf == pytest.approx(1 / ALPHA, rel=1e-9)


def test_sequence_is_wider_than_the_fixed_n_interval_and_narrows():
    factors = [confseq.t_cs_factor(n) for n in range(4, 31)]
    assert all(a > b for a, b in zip(factors, factors[1:], strict=False))
    for n in (5, 10, 20):
        assert confseq.t_cs_factor(n) > intervals.t_quantile(n)
    assert math.isinf(confseq.t_cs_factor(2))  # two trials can exclude nothing at 0.95


def test_sequence_covers_at_every_trial_count_at_once():
    # The probability that the mean leaves the sequence at ANY n <= 30 stays under alpha.
    values = np.random.default_rng(7).normal(3.0, 2.0, (20_000, 30))
    missed = np.zeros(values.shape[0], dtype=bool)
    for n in range(2, 31):
        _, lo, hi = confseq.t_cs_bounds(values[:, :n])
        missed |= (lo > 3.0) | (hi < 3.0)
    assert missed.mean() <= ALPHA


@pytest.mark.parametrize("mean", [-0.5, 0.0, 0.5])
def test_stopping_on_the_sequence_keeps_the_error_rate(mean):
    error, _ = _simulation().simulate("cs", mean, streams=STREAMS, block=1, max_trials=20, seed=11)
    assert error <= ALPHA


def test_peeking_at_a_fixed_n_interval_does_not():
    # The same streams, stopped by the t interval: a mean exactly at the threshold is declared
    # on one side of it far more often than 5% of the time.
    simulation = _simulation()
    peek, _ = simulation.simulate("t-peek", 0.0, streams=STREAMS, block=1, max_trials=20, seed=11)
    sequence, _ = simulation.simulate("cs", 0.0, streams=STREAMS, block=1, max_trials=20, seed=11)
    assert peek > 2 * ALPHA
    assert sequence <= ALPHA


def test_a_clear_effect_is_decided_before_the_cap():
    _, trials = _simulation().simulate("cs", 1.5, streams=STREAMS, block=1, max_trials=20, seed=3)
    assert trials < 12


def test_share_sequence_known_answers():
    lo, hi = confseq.share_cs(0, 0)
    assert (lo, hi) == (0.0, 1.0)
    lo, hi = confseq.share_cs(0, 10)
    assert lo == 0.0 and 0.0 < hi < 1.0
    lo, hi = confseq.share_cs(10, 10)
    assert hi == 1.0 and 0.0 < lo < 1.0
    lo, hi = confseq.share_cs(50, 100)
    assert lo < 0.5 < hi and lo == pytest.approx(1 - hi, abs=1e-9)  # symmetric at one half
    # Wider than Clopper-Pearson's fixed-n interval (0.3935, 0.6065 at 50 of 100).
    assert lo < 0.3935 and hi > 0.6065


def test_share_sequence_covers_under_stopping():
    rng = np.random.default_rng(5)
    p = 0.9
    missed = 0
    # The streams meet the same (successes, n) pairs again and again: each interval is
    # computed once (share_cs is a pure function of its counts).
    share_cs = functools.cache(confseq.share_cs)
    for _ in range(STREAMS):
        outcomes = rng.random(200) < p
        successes = np.cumsum(outcomes)
        for n in range(10, 201, 10):  # trials of 10 outcomes, looked at after each
            lo, hi = share_cs(int(successes[n - 1]), n)
            if not lo <= p <= hi:
                missed += 1
                break
    assert missed / STREAMS <= ALPHA


@pytest.mark.parametrize("args", [(-1, 3), (4, 3), (1, -1)])
def test_share_sequence_refuses_impossible_counts(args):
    with pytest.raises(ValueError):
        confseq.share_cs(*args)
