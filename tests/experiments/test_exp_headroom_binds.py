"""The headroom-binds experiment: the knee rule and the sweep's levels by hand, then tiny
sweeps on fixed lengths where the level that exhausts the pool is known in advance."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[2]
# 16 + 8 tokens: 3 pages of 8 at a request's last token; 15 usable pages hold 5 such requests,
# so levels 0.2, 0.4, 0.8 and 1.6 of that are 1, 2, 4 and 8 requests in flight.
FIXED = {
    "kv_fit_levels": [0.2, 0.4, 0.8, 1.6],
    "requests_per_slot": 2,
    "prompt_len": {"kind": "fixed", "value": 16},
    "output_len": {"kind": "fixed", "value": 8},
}


class TinyContext(RunContext):
    """Serves with the tiny random model and a 15-page pool instead of loading a model."""

    def engine(self, *, precompile=False, compile_cache=False, **overrides):
        engine = tiny_engine(tiny_model(), num_pages=16, **overrides)
        if precompile:
            engine.precompile()
        return engine


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "headroom-binds"))


def _ctx(params: dict, trials: int = 2) -> TinyContext:
    return TinyContext(
        claim_id="headroom-binds",
        profile="quick",
        params=params,
        trials=trials,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )


def _by_level(frame, metric: str):
    rows = frame[frame["metric"] == metric]
    level = rows["labels"].str.extract(r'"concurrency": (\d+)')[0].astype(int)
    return rows.assign(concurrency=level).groupby("concurrency")["value"]


def test_knee_and_exhaustion_by_hand():
    exp = _experiment()
    levels = [
        exp.Level(1, 100.0, 80.0, 0, 0),
        exp.Level(2, 180.0, 60.0, 0, 0),
        exp.Level(4, 290.0, 20.0, 0, 3),  # 290 >= 0.95 * 300: the knee
        exp.Level(8, 300.0, 0.0, 5, 9),
    ]
    assert exp.knee_and_exhaustion(levels, 0.95) == (4, 4)
    assert exp.knee_and_exhaustion(levels[:2], 0.95) == (2, None)


def test_levels_are_multiples_of_the_pool_in_mean_requests():
    exp = _experiment()
    assert exp.kv_fit_concurrency(FIXED, num_usable_pages=15, page_size=8) == pytest.approx(5.0)
    assert exp.concurrencies([0.2, 0.4, 0.8, 1.6], 5.0) == [1, 2, 4, 8]
    assert exp.concurrencies([0.01, 0.1, 1.0], 5.0) == [1, 5]  # at least 1, no duplicates


@pytest.mark.slow
def test_the_sweep_finds_the_level_that_overflows_the_pool(tmp_path):
    ctx = _ctx(FIXED)
    exp = _experiment()
    exp.run(ctx)
    frame = ctx.measurements_frame("run")
    # 4 requests hold at most 12 of 15 pages: admission never waits on KV and nothing is
    # preempted; 8 would need 24, so the pool runs out there, in every trial.
    stalls = _by_level(frame, "num_kv_stalls").sum()
    preempted = _by_level(frame, "num_preemptions").sum()
    assert list(stalls.index) == [1, 2, 4, 8]
    assert (stalls[[1, 2, 4]] == 0).all() and (preempted[[1, 2, 4]] == 0).all()
    assert stalls[8] + preempted[8] > 0
    exhaustion = frame.loc[frame["metric"] == "kv_exhaustion_concurrency"]
    assert list(exhaustion["trial"]) == [0, 1] and (exhaustion["value"] == 8).all()
    headroom = _by_level(frame, "min_kv_headroom_pct").max()
    # 1 request holds 3 pages at most: 12 of 15 stay free; at 8 in flight none do for a while.
    assert headroom[1] == pytest.approx(100 * 12 / 15)
    assert headroom[8] < 100 * 3 / 15
    knee = frame.loc[frame["metric"] == "knee_concurrency", "value"]
    ratio = frame.loc[frame["metric"] == "knee_over_kv_exhaustion", "value"]
    assert ratio.to_numpy() == pytest.approx(knee.to_numpy() / 8)
    frame.to_parquet(tmp_path / "measurements.parquet")
    [(title, svg)] = exp.figures([tmp_path])
    assert "KV headroom" in title and svg.startswith("<svg")


@pytest.mark.slow
def test_a_sweep_that_never_fills_the_pool_is_an_error():
    with pytest.raises(RuntimeError, match="KV headroom never reached zero"):
        _experiment().run(_ctx(FIXED | {"kv_fit_levels": [0.2, 0.4]}, trials=1))


@pytest.mark.slow
def test_bad_params():
    with pytest.raises(ValueError, match="kv_fit_levels must be >= 2 increasing"):
        _experiment().run(_ctx(FIXED | {"kv_fit_levels": [0.8, 0.4]}, trials=1))
    with pytest.raises(ValueError, match=r"unknown param\(s\) \['concurrencies'\]"):
        _experiment().run(_ctx(FIXED | {"concurrencies": [1, 2]}, trials=1))


def test_step_wait_is_checked():
    with pytest.raises(ValueError, match="step_wait_s must be a number of seconds in"):
        _experiment().run(_ctx(FIXED | {"step_wait_s": -1.0}, trials=1))
