"""levers-multiply at tiny size: both metrics every trial from four measured pools."""

from __future__ import annotations

import json

import pytest
from precision_helpers import assert_claim_metrics_recorded, run_experiment, write_tiny_model

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "seq_len": 32,
    "weight_share": 0.5,
    "engine": {"max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    model_dir = write_tiny_model(tmp_path_factory.mktemp("tiny"))
    return run_experiment("levers-multiply", PARAMS, model_dir)


def test_records_every_claim_metric_per_trial(frame):
    values = assert_claim_metrics_recorded("levers-multiply", frame)
    assert all(0.8 < m < 1.2 for m in values["multiply_ratio"])
    assert all(g >= 0 for g in values["ppl_additivity_gap_pct"])


def test_pools_are_the_budget_minus_each_settings_weights(frame):
    trial0 = frame[frame["trial"] == 0]

    def by_setting(metric):
        rows = trial0[trial0["metric"] == metric]
        return {
            json.loads(lb)["setting"]: v
            for lb, v in zip(rows["labels"], rows["value"], strict=True)
        }

    hbm = trial0[trial0["metric"] == "hbm_bytes"]["value"].item()
    weights, pools = by_setting("weight_bytes"), by_setting("kv_pool_bytes")
    assert weights["base"] == pytest.approx(hbm / 2, abs=1)  # weight_share 0.5
    assert weights["both"] < 0.55 * weights["base"]
    for setting, pool in pools.items():
        # The engine allocates whole pages: at most one page under its budget.
        assert hbm - weights[setting] - 16 * 256 <= pool <= hbm - weights[setting]
    capacity = by_setting("capacity_seqs")
    assert capacity["base"] < capacity["weights"] < capacity["both"]
    assert capacity["base"] < capacity["kv"] < capacity["both"]
