"""The continuous-batching experiment at tiny size: both modes serve everything, static waits."""

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
    "num_requests": 8,
    "max_num_seqs": 4,
    "prompt_len": {"kind": "lognormal", "mean": 12, "sigma": 0.8, "lo": 2, "hi": 40},
    "output_len": {"kind": "lognormal", "mean": 8, "sigma": 0.8, "lo": 1, "hi": 24},
}


class TinyContext(RunContext):
    """Serves with the tiny random model instead of loading one from disk."""

    def engine(self, **overrides):
        return tiny_engine(self.params["model"], **overrides)


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "continuous-batching"))


def _ctx(params: dict, trials: int = 2) -> TinyContext:
    return TinyContext(
        claim_id="continuous-batching",
        profile="quick",
        params=params | {"model": tiny_model()},
        trials=trials,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )


def test_tiny_run_records_the_ratio_and_static_batches_wait_for_each_other():
    ctx = _ctx(TINY)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    ratio = frame.loc[frame["metric"] == "throughput_ratio"].sort_values("trial")
    assert list(ratio["trial"]) == [0, 1]
    assert all(math.isfinite(v) and v > 0 for v in ratio["value"])
    requests = ctx.frames()["requests"]
    for (mode, _), served in requests.groupby(["mode", "trial"]):
        assert served["completed"].all() and len(served) == 8
        if mode == "static":
            # A batch starts only once every request of the batch before it has finished.
            first, second = served.iloc[:4], served.iloc[4:]
            assert second["first_scheduled_s"].min() >= first["finish_s"].max()
    continuous = requests[requests["mode"] == "continuous"]
    assert (continuous["first_scheduled_s"].iloc[4:] < continuous["finish_s"].iloc[:4].max()).any()


def test_lengths_must_fit_max_model_len():
    params = TINY | {"output_len": {"kind": "fixed", "value": 127}}
    with pytest.raises(ValueError, match="exceeds max_model_len=128"):
        _experiment().run(_ctx(params, trials=1))
