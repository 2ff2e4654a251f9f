"""kv-int8 at tiny size: both metrics every trial, capacity from the real bytes per token."""

from __future__ import annotations

import pytest
from precision_helpers import assert_claim_metrics_recorded, run_experiment, write_tiny_model

# Tiny model: 2 layers x 4 K/V rows x 16 dims. bf16 stores 2 * 4 * 16 * 2 = 256 B per token,
# int8 2 * 4 * (16 + 4 scale bytes) = 160 B. A 1 MiB pool holds 256 bf16 pages of 16 tokens
# (255 usable beside the null page: 127 sequences of 32 tokens, 2 pages each) and 409 int8
# pages (408 usable: 204 sequences).
PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "pool_bytes": 2**20,
    "seq_len": 32,
    "engine": {"max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    return run_experiment("kv-int8", PARAMS, write_tiny_model(tmp_path_factory.mktemp("tiny")))


def test_records_every_claim_metric_per_trial(frame):
    values = assert_claim_metrics_recorded("kv-int8", frame)
    assert values["capacity_ratio"] == [204 / 127] * 2
    assert all(abs(d) < 5 for d in values["ppl_delta_pct"])
    per_token = frame[frame["metric"] == "kv_bytes_per_token"].groupby("labels")["value"].first()
    assert sorted(per_token.tolist()) == [160, 256]
