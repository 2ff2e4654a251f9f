"""kv-fp8 at tiny size: capacity once, analytic, for Llama-3.1-8B; calibrated-scale quality;
one engine alive at a time."""

from __future__ import annotations

import pytest
from engine_tracking import builds_with_alive
from precision_helpers import (
    analytic_inputs,
    assert_claim_metrics_recorded,
    run_experiment,
    write_tiny_model,
)

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "kv_scale": "calibrate",
    "compare_unit_scale": True,
    "engine": {"kv_pool_bytes": 2**20, "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def frame(model_dir):
    return run_experiment("kv-fp8", PARAMS, model_dir)


@pytest.mark.slow
def test_capacity_is_analytic_once_for_the_claims_model(frame):
    values = assert_claim_metrics_recorded("kv-fp8", frame)
    # 16 GiB of Llama-3.1-8B fp8 pages (1 MiB each, 256 B of scales beside): 16383 pages,
    # 255 sequences of 1024 tokens, against 127 in bf16.
    assert values["capacity_ratio"] == [255 / 127]
    inputs = analytic_inputs(frame, "capacity_ratio")
    assert inputs["fp8"]["fixed_bytes"] == 32 * 2 * 4
    assert inputs["fp8"]["num_pages"] == 16383


@pytest.mark.slow
def test_calibrated_fp8_quantizes_and_calibration_is_recorded_once(frame):
    deltas = frame[frame["metric"] == "ppl_delta_pct"]["value"]
    assert (deltas != 0).all() and (deltas.abs() < 5).all()
    scales = frame[frame["metric"].isin(["k_scale", "v_scale"])]
    assert scales["trial"].tolist() == [0, 0]
    assert ((scales["value"] > 0) & (scales["value"] < 1)).all()  # absmax / 448, not 1.0
    unit = frame[frame["metric"] == "ppl_delta_pct_unit_scale"]
    assert unit["trial"].tolist() == [0, 1]


@pytest.mark.slow
def test_never_holds_two_engines(model_dir, monkeypatch):
    """Each engine is freed before the next is built: bf16, calibrated fp8, unit-scale fp8."""
    built = builds_with_alive("kv-fp8", PARAMS, model_dir, monkeypatch)
    assert [alive for _, alive in built] == [0, 0, 0]
    arms = {(options["kv_dtype"], options.get("kv_scale")) for options, _ in built}
    assert arms == {("bf16", None), ("fp8", "calibrate"), ("fp8", 1.0)}
