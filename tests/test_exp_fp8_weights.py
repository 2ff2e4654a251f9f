"""fp8-weights at tiny size: the three metrics every trial, bytes from the engines' arrays."""

from __future__ import annotations

import pytest
from precision_helpers import assert_claim_metrics_recorded, run_experiment, write_tiny_model

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "engine": {"kv_pool_bytes": 2**20, "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    model_dir = write_tiny_model(tmp_path_factory.mktemp("tiny"))
    return run_experiment("fp8-weights", PARAMS, model_dir)


def test_records_every_claim_metric_per_trial(frame):
    values = assert_claim_metrics_recorded("fp8-weights", frame)
    # Matrices go from 2 bytes to 1 plus an f32 scale per output channel; the norms stay.
    assert all(0.5 < r < 0.55 for r in values["weight_bytes_ratio"])
    assert all(0 < a <= 100 for a in values["top1_agreement_pct"])
    assert all(abs(d) < 5 for d in values["ppl_delta_pct"])


def test_rejects_an_unquantized_format(tmp_path):
    with pytest.raises(ValueError, match="int8 or fp8"):
        run_experiment("fp8-weights", {**PARAMS, "weights": "bf16"}, tmp_path)
