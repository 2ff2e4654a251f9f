"""The paged-waste experiment: pool filling by hand, then a tiny run recording every metric."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("paged_waste_pct", "contiguous_waste_pct", "concurrency_ratio")


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "paged-waste"))


def test_fill_pool_by_hand():
    fill_pool = _experiment().fill_pool
    lengths = np.array([20, 5, 40, 1])
    # 64 slots = 4 pages of 16: 20 tokens take 2 pages, 5 take 1, 40 would need 3 more.
    assert fill_pool(lengths, page_size=16, pool_tokens=64) == (2, 48, 25)
    # Reserving 32 slots each: two reservations fill 64 slots, 25 of them used.
    assert fill_pool(lengths, page_size=32, pool_tokens=64, reserve_tokens=32) == (2, 64, 25)


def test_lengths_fit_max_model_len():
    exp = _experiment()
    params = exp.DEFAULT_PARAMS | {"max_model_len": 64}
    prompt, output = exp.draw_lengths(params, np.random.default_rng(0), 2000)
    assert prompt.min() >= 1 and output.min() >= 1 and (prompt + output).max() <= 64


def test_tiny_run_records_every_metric_each_trial():
    ctx = RunContext(
        claim_id="paged-waste",
        profile="quick",
        params={"pool_tokens": 8192, "max_model_len": 512},
        trials=2,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    for metric in METRICS:
        values = frame.loc[frame["metric"] == metric].sort_values("trial")
        assert list(values["trial"]) == [0, 1]
        assert all(math.isfinite(v) for v in values["value"])
    by_metric = frame.groupby("metric")["value"].mean()
    assert 0 < by_metric["paged_waste_pct"] < by_metric["contiguous_waste_pct"] < 100
    assert by_metric["concurrency_ratio"] > 1


def test_bad_params():
    ctx = RunContext(
        claim_id="paged-waste",
        profile="quick",
        params={"page_size": 0},
        trials=1,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )
    with pytest.raises(ValueError, match="param page_size must be a positive integer, got 0"):
        _experiment().run(ctx)
