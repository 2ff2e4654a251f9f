"""continuous-batching's counterfactual: static batches in the continuous arm too leave no
throughput gain."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from test_exp_continuous_batching import TINY, _ctx, _experiment

CLAIM = "continuous-batching"


@pytest.mark.slow
def test_static_in_both_arms_gains_nothing():
    ctx = _ctx(TINY | {"counterfactual": "static-both"}, trials=1)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "throughput_ratio", metric_values(frame, "throughput_ratio"))
    # The same batches stepped the same number of times: the arms no longer differ.
    steps = frame[frame["metric"] == "num_steps"]["value"]
    assert steps.nunique() == 1
