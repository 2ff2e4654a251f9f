"""kv-dominates' measured part: the bytes the engine really allocates for the served model."""

from __future__ import annotations

import dataclasses
import json

import pytest
from precision_helpers import ROOT, TRIALS, run_experiment, write_tiny_model

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.model_presets import get_preset
from claimbench.harness.registry import load_experiment
from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer

PARAMS = {"measure": True, "batch": 4, "context": 40, "engine": {"page_size": 16}}


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    model_dir = write_tiny_model(tmp_path_factory.mktemp("served-model", numbered=False))
    return run_experiment("kv-dominates", PARAMS, model_dir)


def test_served_model_bytes_are_supporting_metrics(frame):
    served = frame[frame["metric"].str.startswith("served_")]
    assert set(served["evidence"]) == {"cpu"}
    assert {json.loads(lb)["model"] for lb in served["labels"]} == {"served-model"}
    values = served[served["trial"] == 0].set_index("metric")["value"]
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
    # The claim's own metric stays analytic: a tiny model is not Llama-3.1-8B.
    claim_metric = frame[frame["metric"] == "kv_over_weights"]
    assert set(claim_metric["evidence"]) == {"analytic"}
    assert sorted(claim_metric["trial"]) == list(range(TRIALS))


def test_the_claim_models_shape_is_evidence_for_the_claim():
    module = load_experiment(ROOT, find_claim(load_claims(ROOT), "kv-dominates"))
    ctx = RunContext(
        claim_id="kv-dominates",
        profile="quick",
        params={},
        trials=1,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="bfloat16",
    )
    claim_model = get_preset("llama-3.1-8b")
    sizes = module.KVWeightSizes(kv_bytes_per_token=1, kv_bytes=3, weight_bytes=2)
    served = dataclasses.replace(claim_model, name="Meta-Llama-3.1-8B")
    module.record_measured(ctx, sizes, served, claim_model, trial=0)
    rows = ctx.measurements_frame("x").set_index("metric")
    assert rows.loc["kv_over_weights", "value"] == 1.5
    assert rows.loc["kv_over_weights", "evidence"] == "cpu"
