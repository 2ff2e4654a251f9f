"""decode-bandwidth-bound's conditions read either side, at tiny size, on a device of known
physics (lab/engines/roofline_device.py: every step takes its own roofline time on DEVICE's
bandwidth and peak, far above a tiny step's host work). On this host's real CPU the registered
run lands wherever the CPU's physics puts it, so a counterfactual there could show only one
side; on the modeled device a memory-bound decode holds both conditions, and each
counterfactual (the real experiment, one thing changed) moves its condition past the
threshold: every step padded to the token budget past the device's ridge point (compute the
byte roofline does not count), and MFU measured against the FLOP/s the decode steps themselves
reach (a device whose compute they saturate)."""

from __future__ import annotations

import pytest
from counterfactual_helpers import assert_fails, assert_holds, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint
from test_exp_decode_bandwidth_bound import TINY

CLAIM = "decode-bandwidth-bound"
# The tiny model's 109,248 float32 weights (437 kB) take 87 ms to read at 5 MB/s. A ridge
# point of 20 FLOP/byte puts a decode of 3 sequences (1.5 FLOP per weight byte) under 8% MFU,
# and a step padded to 64 tokens (32 FLOP per weight byte: 140 ms of compute) well past its
# byte roofline.
DEVICE = {"bytes_per_s": 5e6, "flops_per_s": 1e8}
MODELED = TINY | {"device": DEVICE, "engine": TINY["engine"] | {"max_num_batched_tokens": 64}}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


@pytest.mark.slow
def test_a_memory_bound_decode_holds_both_conditions_on_the_modeled_device(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=MODELED)
    frame = ctx.measurements_frame("run")
    assert_holds(CLAIM, "step_over_roofline", metric_values(frame, "step_over_roofline"))
    assert_holds(CLAIM, "mfu_pct", metric_values(frame, "mfu_pct"))
    assert metric_values(frame, "roofline_bytes_per_s") == [DEVICE["bytes_per_s"]]


@pytest.mark.slow
def test_steps_padded_to_the_budget_are_far_from_the_byte_roofline(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=MODELED | {"counterfactual": "one-bucket"})
    steps = ctx.frames()["steps"]
    assert set(steps["token_bucket"]) == {64}
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "step_over_roofline", metric_values(frame, "step_over_roofline"))


@pytest.mark.slow
def test_against_a_peak_the_steps_reach_mfu_is_well_past_ten_percent(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=MODELED | {"counterfactual": "attained-peak"})
    frame = ctx.measurements_frame("run")
    [attained] = metric_values(frame, "attained_flops_per_s")
    assert 0 < attained < DEVICE["flops_per_s"]  # the decode steps stay below the peak
    assert_fails(CLAIM, "mfu_pct", metric_values(frame, "mfu_pct"))


def test_an_unknown_counterfactual_is_named(checkpoint):
    with pytest.raises(ValueError, match="'no-kv'"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"counterfactual": "no-kv"})


@pytest.mark.parametrize(
    "device",
    [{"bytes_per_s": 5e6}, {"bytes_per_s": 0, "flops_per_s": 1e8}, "fast", {"a": 1, "b": 2}],
)
def test_a_bad_device_is_named(checkpoint, device):
    with pytest.raises(ValueError, match="param device"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"device": device})
