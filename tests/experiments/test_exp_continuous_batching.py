"""The continuous-batching experiment: both arms stepped by hand on fixed lengths, the drain
share, then a tiny run of the whole experiment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment
from claimbench.workload.build import WorkloadRequest

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "num_requests": 240,
    "max_num_seqs": 4,
    "prompt_len": {"kind": "lognormal", "mean": 6, "sigma": 0.8, "lo": 2, "hi": 16},
    "output_len": {"kind": "lognormal", "mean": 8, "sigma": 1.0, "lo": 1, "hi": 16},
}


class TinyContext(RunContext):
    """Serves with the tiny random model instead of loading one from disk."""

    def engine(self, *, precompile=False, compile_cache=False, **overrides):
        engine = tiny_engine(tiny_model(), **overrides)
        if precompile:
            engine.precompile()
        return engine


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "continuous-batching"))


def _ctx(params: dict, trials: int = 2) -> TinyContext:
    return TinyContext(
        claim_id="continuous-batching",
        profile="quick",
        params=params,
        trials=trials,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )


def _requests(outputs: list[int]) -> list[WorkloadRequest]:
    """4-token prompts: four of them (16 tokens) prefill together in one 32-token step."""
    return [
        WorkloadRequest(0.0, "default", 0, tuple(range(3 + i, 7 + i)), n, i)
        for i, n in enumerate(outputs)
    ]


def _admission_steps(engine) -> list[int]:
    """The step at which each request was first scheduled (step starts are its timestamps)."""
    starts = engine.steps_frame()["start_s"].to_numpy()
    first = engine.requests_frame()["first_scheduled_s"].to_numpy()
    return np.searchsorted(starts, first).tolist()


@pytest.mark.slow
def test_static_waits_for_each_batch_longest_and_continuous_refills_a_freed_slot():
    serve = _experiment().serve
    outputs = [1, 2, 3, 9, 2, 2, 9, 1]
    # Synchronous, so each finish is stamped in the step that makes it (the drain share's
    # times); async scheduling stamps it one step later.
    engine = tiny_engine(max_num_seqs=4, async_scheduling=False)
    serve(engine, _requests(outputs), 4)
    # A batch takes as many steps as its longest output (the prefill step makes the first
    # token): max(1, 2, 3, 9) + max(2, 2, 9, 1) = 18, however short the others are.
    assert len(engine.steps_frame()) == 18
    assert _admission_steps(engine) == [0] * 4 + [9] * 4

    engine.reset()
    serve(engine, _requests(outputs), None)
    # Continuous: r0 finishes in step 0, so r4 joins in step 1; r1 finishes in step 1, so r5
    # joins in step 2; r2 and r4 finish in step 2, so r6 and r7 join in step 3. r6 then needs
    # 9 steps: 3 + 9 = 12.
    assert _admission_steps(engine) == [0, 0, 0, 0, 1, 2, 3, 3]
    assert len(engine.steps_frame()) == 12
    # While requests wait, every step runs a full batch.
    assert (engine.steps_frame()["num_seqs"].iloc[:4] == 4).all()
    # Then 8 of the 12 steps drain (r7 finishes in step 3; r3 and r6 run on, half empty): the
    # drain share sees a run too short to measure steady batching.
    assert _experiment().drain_step_share(engine.requests_frame(), engine.steps_frame()) == 8 / 12
    assert _experiment().drain_share(engine.requests_frame()) > 0.3


@pytest.mark.slow
def test_drain_share_is_the_tail_after_the_last_admission():
    drain_share = _experiment().drain_share
    frame = pd.DataFrame(
        {
            "arrival_s": [0.0, 0.0, 0.0, 0.0],
            "first_scheduled_s": [0.0, 0.0, 1.0, 2.0],
            "finish_s": [1.0, 2.0, 8.0, 10.0],
        }
    )
    # Last admission at 2.0; the first finish after it is 8.0; the run ends at 10.0.
    assert drain_share(frame) == pytest.approx(0.2)


@pytest.mark.slow
def test_tiny_run_drains_under_5_percent_and_alternates_the_arms():
    ctx = _ctx(TINY)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    # Counted in steps (deterministic), the drain is under 5% of the continuous run.
    drain = frame.loc[frame["metric"] == "drain_step_share_pct"].sort_values("trial")
    assert list(drain["trial"]) == [0, 1]
    assert drain["value"].between(0, 5, inclusive="neither").all()
    assert (frame.loc[frame["metric"] == "drain_share_pct", "value"] > 0).all()
    ratio = frame.loc[frame["metric"] == "throughput_ratio"]
    assert list(ratio["trial"]) == [0, 1] and (ratio["value"] > 0).all()
    # The static arm pays for each batch's longest output in steps, on every trial.
    steps = frame[frame["metric"] == "num_steps"]
    by_mode = steps.assign(mode=steps["labels"].str.extract(r'"mode": "(\w+)"')[0])
    per_trial = by_mode.pivot(index="trial", columns="mode", values="value")
    assert (per_trial["static"] > per_trial["continuous"]).all()
    throughput = frame[frame["metric"] == "output_throughput"]
    first_mode = throughput.groupby("trial")["labels"].first()
    assert "continuous" in first_mode[0] and "static" in first_mode[1]
    requests = ctx.frames()["requests"]
    assert (
        requests.groupby(["mode", "trial"])["completed"]
        .agg(["all", "size"])
        .eq([True, 240])
        .all(axis=None)
    )


@pytest.mark.slow
def test_params_are_checked():
    with pytest.raises(ValueError, match="exceeds max_model_len=128"):
        _experiment().run(_ctx(TINY | {"output_len": {"kind": "fixed", "value": 127}}, trials=1))
    with pytest.raises(ValueError, match=r"unknown param\(s\) \['num_request'\]"):
        _experiment().run(_ctx(TINY | {"num_request": 8}, trials=1))
