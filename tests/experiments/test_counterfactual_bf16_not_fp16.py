"""bf16-not-fp16's counterfactuals at tiny size (the real experiment, one thing changed): the
quality condition with the bf16 engine's weights destroyed (two values per output channel),
and the speed condition with the bf16 engine on a device slower per step
(lab/engines/slow_device.py), each land on the other side of their threshold."""

from __future__ import annotations

import pytest
from counterfactual_helpers import assert_fails, metric_values
from precision_helpers import run_experiment, write_tiny_model
from test_exp_bf16_not_fp16 import PARAMS

CLAIM = "bf16-not-fp16"


@pytest.mark.slow
def test_a_destroyed_bf16_puts_fp16_far_ahead_of_it(tmp_path, monkeypatch):
    monkeypatch.setattr("claimbench.harness.context.COMPILE_CACHE_DIR", tmp_path / "cache")
    model_dir = write_tiny_model(tmp_path / "tiny")
    frame = run_experiment(CLAIM, {**PARAMS, "counterfactual": "bf16-destroyed"}, model_dir)
    values = metric_values(frame, "fp16_minus_bf16_top1_pts")
    assert_fails(CLAIM, "fp16_minus_bf16_top1_pts", values)


@pytest.mark.slow
def test_a_slowed_bf16_step_puts_fp16_ahead_on_speed(tmp_path):
    model_dir = write_tiny_model(tmp_path / "tiny")
    frame = run_experiment(CLAIM, {**PARAMS, "counterfactual": "bf16-slowed"}, model_dir)
    assert_fails(CLAIM, "fp16_speedup", metric_values(frame, "fp16_speedup"))
    speeds = frame[frame["metric"] == "decode_tokens_per_s"]
    assert len(speeds) == 2 * len(metric_values(frame, "fp16_speedup"))
