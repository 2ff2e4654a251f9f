"""The headroom-binds experiment: the knee rule by hand, then a tiny sweep that exhausts KV."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "concurrencies": [1, 2, 4, 8],
    "requests_per_slot": 1,
    "prompt_len": {"kind": "lognormal", "mean": 16, "sigma": 0.5, "lo": 4, "hi": 40},
    "output_len": {"kind": "lognormal", "mean": 8, "sigma": 0.5, "lo": 2, "hi": 24},
}


class TinyContext(RunContext):
    """Serves with the tiny random model and a 15-page pool instead of loading a model."""

    def engine(self, **overrides):
        return tiny_engine(self.params["model"], num_pages=16, **overrides)


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "headroom-binds"))


def _ctx(params: dict, trials: int = 2) -> TinyContext:
    return TinyContext(
        claim_id="headroom-binds",
        profile="quick",
        params=params | {"model": tiny_model()},
        trials=trials,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )


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


def test_tiny_sweep_records_every_metric_and_draws_the_chart(tmp_path):
    ctx = _ctx(TINY)
    exp = _experiment()
    exp.run(ctx)
    frame = ctx.measurements_frame("run")
    ratio = frame.loc[frame["metric"] == "knee_over_kv_exhaustion"].sort_values("trial")
    assert list(ratio["trial"]) == [0, 1]
    assert all(math.isfinite(v) and v > 0 for v in ratio["value"])
    throughput = frame[frame["metric"] == "output_throughput"]
    assert len(throughput) == 2 * 4 and (throughput["value"] > 0).all()
    headroom = frame.loc[frame["metric"] == "min_kv_headroom_pct", "value"]
    assert headroom.between(0, 100).all() and headroom.min() < 50
    frame.to_parquet(tmp_path / "measurements.parquet")
    [(title, svg)] = exp.figures([tmp_path])
    assert "KV headroom" in title and svg.startswith("<svg")


def test_bad_params():
    with pytest.raises(ValueError, match="concurrencies must be increasing"):
        _experiment().run(_ctx(TINY | {"concurrencies": [4, 2]}, trials=1))
