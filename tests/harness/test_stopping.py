"""The until-decided stopping rule: sides of a threshold, caps, and trials still needed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from claimbench.harness import confseq, stopping


@pytest.mark.parametrize(
    ("lo", "hi", "op", "threshold", "expected"),
    [
        (2.0, 3.0, ">=", 1.5, stopping.HOLDS),
        (1.5, 3.0, ">=", 1.5, stopping.HOLDS),
        (1.5, 3.0, ">", 1.5, stopping.UNDECIDED),
        (0.5, 1.0, ">=", 1.5, stopping.FAILS),
        (1.0, 2.0, ">=", 1.5, stopping.UNDECIDED),
        (0.5, 1.0, "<=", 1.5, stopping.HOLDS),
        (2.0, 3.0, "<", 1.5, stopping.FAILS),
        (1.0, 1.5, "<", 1.5, stopping.UNDECIDED),
    ],
)
def test_side(lo, hi, op, threshold, expected):
    assert stopping.side(lo, hi, op, threshold) == expected


def test_mean_status_decides_clear_streams_and_not_noise():
    rng = np.random.default_rng(0)
    assert stopping.mean_status(rng.normal(5, 0.1, 8), ">=", 1.0) == stopping.HOLDS
    assert stopping.mean_status(rng.normal(5, 0.1, 8), "<=", 1.0) == stopping.FAILS
    assert stopping.mean_status(rng.normal(1.0, 1.0, 8), ">=", 1.0) == stopping.UNDECIDED
    assert stopping.mean_status(np.array([2.0, 2.0, 2.0]), ">=", 1.0) == stopping.UNDECIDED


def test_mean_status_of_ratios_is_in_log_space():
    ratios = np.array([2.0, 2.1, 1.9, 2.05, 1.95, 2.0])
    assert stopping.mean_status(ratios, ">=", 1.5, log_space=True) == stopping.HOLDS
    # The same values taken literally around 1.5 decide the same way; a ratio's log interval
    # never reaches zero, so a threshold of 0 is below every ratio.
    assert stopping.mean_status(ratios, ">=", 0.0, log_space=True) == stopping.HOLDS


def test_rule_blocks_and_caps():
    rule = stopping.StoppingRule(block_trials=5, max_trials=12)
    assert [rule.next_block(done) for done in (0, 5, 10, 12)] == [5, 5, 2, 0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"block_trials": 0, "max_trials": 5},
        {"block_trials": True, "max_trials": 5},
        {"block_trials": 5, "max_trials": 4},
        {"block_trials": 5, "max_trials": 10, "max_minutes": 0},
        {"block_trials": 5, "max_trials": 10, "max_minutes": math.nan},
        {"block_trials": 5, "max_trials": 10, "level": 1.0},
    ],
)
def test_rule_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        stopping.StoppingRule(**kwargs)


def test_trials_to_decide_is_the_first_n_whose_sequence_clears():
    n = stopping.trials_to_decide(estimate=2.0, sd=1.0, num_trials=5, threshold=1.0)
    assert n is not None
    assert confseq.t_cs_factor(n) / math.sqrt(n) < 1.0
    assert confseq.t_cs_factor(n - 1) / math.sqrt(n - 1) >= 1.0
    # An estimate on the threshold, or no spread to extrapolate from: nothing decides it.
    assert stopping.trials_to_decide(1.0, 1.0, 5, 1.0) is None
    assert stopping.trials_to_decide(2.0, 0.0, 5, 1.0) is None
    # Closer to the threshold needs more trials.
    assert stopping.trials_to_decide(1.2, 1.0, 5, 1.0) > n
