import pandas as pd
import pytest
from tenant_exp_helpers import (
    TINY_ENGINE_PARAMS,
    arm_requests,
    assert_claim_metrics_recorded,
    experiment,
    modes_in_order,
    run_tiny,
    trial_labels,
    write_checkpoint,
)

from claimbench.lab.load.tenant_runs import ServedRun

CLAIM = "fairness-vtc"


def test_service_gap_uses_the_runs_own_bound():
    steps = pd.DataFrame(
        {
            "running_tokens": [40, 100],
            "input_tokens.a": [30, 30],
            "output_tokens.a": [0, 1],
            "backlogged.a": [True, True],
            "input_tokens.b": [0, 0],
            "output_tokens.b": [0, 0],
            "backlogged.b": [True, True],
        }
    )
    served = ServedRun(pd.DataFrame({"prompt_tokens": [30, 12]}), steps, 1.0, False)
    params = {"input_weight": 1.0, "output_weight": 2.0}
    result = experiment(CLAIM).service_gap(served, params)
    # gap: a got 30 + 2 = 32 more than b; bound 2 * max(1 * 30, 2 * 100) = 400.
    assert result == {"gap": 32.0, "bound": 400.0, "gap_over_bound": pytest.approx(0.08)}


def assert_same_requests(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Same tenants, lengths and arrival offsets (the engine clock starts at its reset)."""
    columns = ["tenant", "prompt_tokens", "output_tokens"]
    pd.testing.assert_frame_equal(a[columns], b[columns])
    offsets = [x["arrival_s"] - x["arrival_s"].min() for x in (a, b)]
    assert offsets[0].to_numpy() == pytest.approx(offsets[1].to_numpy(), abs=1e-9)


@pytest.mark.slow
def test_tiny_run_serves_one_episode_to_both_policies(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        trials=2,
        base=TINY_ENGINE_PARAMS,
        episode_requests=16,
    )
    assert_claim_metrics_recorded(ctx)
    # Modes rotate: each runs first in one trial.
    assert modes_in_order(ctx, 0) == ["fcfs", "vtc"] and modes_in_order(ctx, 1) == ["vtc", "fcfs"]
    gaps = trial_labels(ctx, "fcfs_gap_over_bound")
    for trial in range(2):
        fcfs, vtc = arm_requests(ctx, trial, "fcfs"), arm_requests(ctx, trial, "vtc")
        # The arms differ only in the policy: the same requests, every one served to the end.
        assert_same_requests(fcfs, vtc)
        assert (fcfs["finish_reason"] == "length").all() and (
            vtc["finish_reason"] == "length"
        ).all()
        assert gaps[trial]["num_requests"] == len(fcfs) and not gaps[trial]["timed_out"]
        assert {"heavy", "light"} == set(fcfs["tenant"])
    # Each trial measured its own saturation, and the trials drew different requests.
    assert gaps[0]["saturation_tok_s"] != gaps[1]["saturation_tok_s"]
    # The second trial was paced by the saturation the first measured after its arms.
    assert gaps[1]["paced_tok_s"] == gaps[0]["saturation_tok_s"]
    assert not arm_requests(ctx, 0, "fcfs")["arrival_s"].equals(
        arm_requests(ctx, 1, "fcfs")["arrival_s"]
    )
    recorded = ctx.measurements_frame("run")
    for row, labels in zip(
        recorded[recorded["metric"] == "fcfs_gap_over_bound"].itertuples(), gaps, strict=True
    ):
        assert row.value == pytest.approx(labels["gap"] / labels["bound"])
    steps = ctx.frames()["steps"]
    assert {"input_tokens.heavy", "output_tokens.light", "backlogged.heavy"} <= set(steps.columns)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    steps.to_parquet(run_dir / "steps.parquet")
    [(title, svg)] = experiment(CLAIM).figures([run_dir])
    assert "FCFS and VTC" in title and svg.startswith("<svg")
    # One legend naming both tenants; units on the axes.
    assert svg.count("tenant heavy") == 1 and svg.count("tenant light") == 1
    assert "time since run start (s)" in svg and "weighted tokens" in svg
    assert experiment(CLAIM).figures([]) == []
