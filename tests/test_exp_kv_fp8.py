"""kv-fp8 at tiny size: both metrics every trial, calibrated scales, the unit-scale baseline."""

from __future__ import annotations

import pytest
from precision_helpers import assert_claim_metrics_recorded, run_experiment, write_tiny_model

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "pool_bytes": 2**20,
    "seq_len": 32,
    "kv_scale": "calibrate",
    "compare_unit_scale": True,
    "engine": {"max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    return run_experiment("kv-fp8", PARAMS, write_tiny_model(tmp_path_factory.mktemp("tiny")))


def test_records_every_claim_metric_per_trial(frame):
    values = assert_claim_metrics_recorded("kv-fp8", frame)
    # fp8 stores 128 B per token against bf16's 256; the two f32 scales per layer (16 B) cost
    # no page of a 1 MiB pool: 511 usable pages, 255 sequences of 2 pages, against 127.
    assert values["capacity_ratio"] == [255 / 127] * 2
    assert all(abs(d) < 5 for d in values["ppl_delta_pct"])
    scales = frame[frame["metric"].isin(["k_scale", "v_scale"])]["value"]
    assert ((scales > 0) & (scales < 1)).all()  # calibrated: absmax / 448, not 1.0
    assert frame[frame["metric"] == "ppl_delta_pct_unit_scale"]["trial"].tolist() == [0, 1]
