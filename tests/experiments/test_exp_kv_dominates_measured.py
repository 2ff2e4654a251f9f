"""kv-dominates' measured side: the bytes the engine really allocates for the served model,
recorded once as labelled side metrics, never as the claim's condition."""

from __future__ import annotations

import json

import pytest
from precision_helpers import run_experiment, write_tiny_model

from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer

PARAMS = {"measure": True, "batch": 4, "context": 40, "engine": {"page_size": 16}}


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    model_dir = write_tiny_model(tmp_path_factory.mktemp("served-model", numbered=False))
    return run_experiment("kv-dominates", PARAMS, model_dir)


@pytest.mark.slow
def test_served_model_bytes_are_side_metrics_recorded_once(frame):
    served = frame[frame["metric"].str.startswith("served_")]
    assert set(served["evidence"]) == {"cpu"}
    assert set(served["trial"]) == {0}
    assert {json.loads(lb)["model"] for lb in served["labels"]} == {"served-model"}
    values = served.set_index("metric")["value"]
    # 4 sequences of 40 tokens take 3 pages each, plus the null page: 13 pages of 16 tokens at
    # 2 layers * 4 K/V rows * 16 dims * 2 bytes = 256 bytes per token.
    assert values["served_kv_bytes"] == 13 * 16 * 256
    # bf16 weights: tied embedding vocab x 64, per layer q, k, v, o and the MLP, 5 norms.
    vocab, d = Tokenizer.from_dir(default_model_path()).vocab_size, 64
    per_layer = d * d + 2 * d * 32 + d * d + 3 * d * 128
    assert values["served_weight_bytes"] == 2 * (vocab * d + 2 * per_layer + 5 * d)
    assert values["served_kv_over_weights"] == pytest.approx(
        values["served_kv_bytes"] / values["served_weight_bytes"]
    )
    # The claim's own metric stays analytic, once: a tiny model is not Llama-3.1-8B.
    claim_metric = frame[frame["metric"] == "kv_over_weights"]
    assert claim_metric[["trial", "evidence"]].values.tolist() == [[0, "analytic"]]
