"""tp-refutation: latency_ratio, with the larger tp's engine built unsharded, lands on the
other side of its threshold (the real experiment at tiny size, one thing changed)."""

from __future__ import annotations

import pytest
from counterfactual_helpers import assert_mean_fails, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint

CLAIM = "tp-refutation"
# As tests/sharding_worker.py runs the experiment; unsharded, it needs no virtual devices.
PARAMS = {
    "tps": [1, 2],
    "batch": 4,
    "prompt_len": 8,
    "output_len": 6,
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "token_buckets": [32],
        "max_model_len": 64,
    },
}


@pytest.mark.slow
def test_without_sharding_the_larger_tp_is_no_faster(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "tiny"),
        trials=2,
        base={},
        **PARAMS,
        counterfactual="tp-off",
    )
    # Both arms' engines are unsharded; the tp=2 arm keeps its label.
    assert [c["tp"] for c in ctx.engine_configs] == [1, 1]
    frame = ctx.measurements_frame("run")
    assert_mean_fails(CLAIM, "latency_ratio", metric_values(frame, "latency_ratio"))
