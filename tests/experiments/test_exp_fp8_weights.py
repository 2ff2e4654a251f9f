"""fp8-weights at tiny size: the byte ratio once, analytic; quality per trial."""

from __future__ import annotations

import pytest
from precision_helpers import (
    analytic_inputs,
    assert_claim_metrics_recorded,
    by_label,
    run_experiment,
    write_tiny_model,
)

from claimbench.hardware.model_presets import shape_from_config
from claimbench.lab.metrics.capacity import weight_layout_bytes
from claimbench.models.checkpoint import read_config

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "engine": {"kv_pool_bytes": 2**20, "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def frame(model_dir):
    return run_experiment("fp8-weights", PARAMS, model_dir)


@pytest.mark.slow
def test_bytes_ratio_is_analytic_once_for_llama_3_1_8b(frame):
    values = assert_claim_metrics_recorded("fp8-weights", frame)
    # tests/lab/test_quality_capacity.py: 8,037,058,560 fp8 bytes against 16,060,522,496 in bf16.
    assert values["weight_bytes_ratio"] == [8_037_058_560 / 16_060_522_496]
    inputs = analytic_inputs(frame, "weight_bytes_ratio")
    assert inputs["layout"]["head_dim"] == 128 and inputs["fp8_bytes"] == 8_037_058_560


@pytest.mark.slow
def test_quantized_weights_change_the_served_models_numbers(frame, model_dir):
    deltas = frame[frame["metric"] == "ppl_delta_pct"]["value"]
    assert (deltas != 0).all() and (deltas.abs() < 5).all()
    agree = frame[frame["metric"] == "top1_agreement_pct"]["value"]
    assert agree.between(50, 100).all()
    held = by_label(frame, "served_weight_bytes")
    shape = shape_from_config("tiny", read_config(model_dir))
    assert held == {w: weight_layout_bytes(shape, w) for w in ("bf16", "fp8")}


def test_rejects_an_unquantized_format(tmp_path):
    with pytest.raises(ValueError, match="int8 or fp8"):
        run_experiment("fp8-weights", {**PARAMS, "weights": "bf16"}, tmp_path)
