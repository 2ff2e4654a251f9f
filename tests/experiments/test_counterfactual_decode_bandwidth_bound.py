"""decode-bandwidth-bound's counterfactuals at tiny size (the real experiment, one thing
changed): step_over_roofline with every step padded to the token budget (compute the byte
roofline does not count), and mfu_pct measured against the FLOP/s the decode steps themselves
reach (a device whose compute they saturate), each land on the other side of their threshold."""

from __future__ import annotations

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint
from test_exp_decode_bandwidth_bound import TINY

CLAIM = "decode-bandwidth-bound"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


@pytest.mark.slow
def test_steps_padded_to_the_budget_are_far_from_the_byte_roofline(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"counterfactual": "one-bucket"})
    steps = ctx.frames()["steps"]
    assert set(steps["token_bucket"]) == {TINY["engine"]["max_num_batched_tokens"]}
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "step_over_roofline", metric_values(frame, "step_over_roofline"))


@pytest.mark.slow
def test_against_a_peak_the_steps_reach_mfu_is_well_past_ten_percent(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"counterfactual": "attained-peak"})
    frame = ctx.measurements_frame("run")
    [attained] = metric_values(frame, "attained_flops_per_s")
    [probe] = metric_values(frame, "roofline_flops_per_s")
    assert 0 < attained < probe  # the peak the steps reach is far below the matmul probe's
    assert_fails(CLAIM, "mfu_pct", metric_values(frame, "mfu_pct"))


def test_an_unknown_counterfactual_is_named(checkpoint):
    with pytest.raises(ValueError, match="'no-kv'"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"counterfactual": "no-kv"})
