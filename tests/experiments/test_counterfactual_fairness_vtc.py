"""fairness-vtc's counterfactuals: each measured condition crosses its threshold once the
mechanism it rests on is switched off, at tiny size."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import TINY_ENGINE_PARAMS, run_tiny, trial_labels, write_checkpoint

CLAIM = "fairness-vtc"
# Overload long enough that arrival order lets the heavy tenant run far ahead.
EPISODE = {"episode_requests": 48, "heavy_share": 0.8, "load": 3.0}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.mark.slow
def test_vtc_off_leaves_the_gap_past_its_bound(checkpoint):
    ctx = run_tiny(
        CLAIM, checkpoint, trials=1, base=TINY_ENGINE_PARAMS, counterfactual="vtc-off", **EPISODE
    )
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "vtc_gap_over_bound", metric_values(frame, "vtc_gap_over_bound"))
    assert not trial_labels(ctx, "vtc_gap_over_bound")[0]["timed_out"]


@pytest.mark.slow
def test_fcfs_served_fairly_keeps_its_gap_under_three_bounds(checkpoint):
    ctx = run_tiny(
        CLAIM, checkpoint, trials=1, base=TINY_ENGINE_PARAMS, counterfactual="fcfs-fair", **EPISODE
    )
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "fcfs_gap_over_bound", metric_values(frame, "fcfs_gap_over_bound"))


@pytest.mark.slow
def test_vtc_idling_half_the_batch_costs_throughput(checkpoint):
    ctx = run_tiny(
        CLAIM, checkpoint, trials=1, base=TINY_ENGINE_PARAMS, counterfactual="vtc-idle", **EPISODE
    )
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "throughput_cost_pct", metric_values(frame, "throughput_cost_pct"))
