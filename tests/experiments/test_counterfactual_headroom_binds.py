"""headroom-binds' counterfactual: with a pool that never binds, throughput keeps rising past the
level at which the registered pool would have run out, so the knee lands well after it."""

import pytest
from counterfactual_helpers import assert_fails_op, metric_values
from test_exp_headroom_binds import FIXED, _ctx, _experiment

CLAIM = "headroom-binds"
# 16 + 48 tokens: 8 pages of 8 at a request's last token, so the registered 15 pages hold
# fewer than 2 such requests and the levels are 1, 2 and 4 in flight: the registered pool runs
# out at 2, the elastic one (63 pages) holds 4 (32 pages), and decode throughput keeps rising.
PARAMS = FIXED | {
    "kv_fit_levels": [0.5, 1.0, 2.0, 2.5],
    "output_len": {"kind": "fixed", "value": 48},
    "counterfactual": "kv-elastic",
    # Every step 30 ms longer, whatever its batch: throughput follows the batch, not the host.
    "step_wait_s": 0.03,
}


@pytest.mark.slow
def test_kv_elastic_puts_the_knee_past_the_registered_pools_exhaustion():
    ctx = _ctx(PARAMS, trials=1)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    assert metric_values(frame, "kv_exhaustion_concurrency") == [2]
    values = metric_values(frame, "knee_over_kv_exhaustion")
    assert_fails_op(CLAIM, "knee_over_kv_exhaustion", "<=", values)


@pytest.mark.slow
def test_compute_bound_steps_put_the_knee_well_before_exhaustion():
    # FIXED's 1, 2 and 8 in flight (its 4 left out: the wait, 50 ms a scheduled token, is the
    # test's time, and a flat throughput puts the knee at 1 with or without it); the pool runs
    # out at 8 as in the registered design.
    params = FIXED | {"kv_fit_levels": [0.2, 0.4, 1.6], "counterfactual": "compute-bound"}
    ctx = _ctx(params, trials=1)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    assert metric_values(frame, "kv_exhaustion_concurrency") == [8]
    values = metric_values(frame, "knee_over_kv_exhaustion")
    assert_fails_op(CLAIM, "knee_over_kv_exhaustion", ">=", values)
