"""kv-int8 at tiny size: capacity once, analytic, for Llama-3.1-8B; quality per trial."""

from __future__ import annotations

import pytest
from engine_tracking import builds_with_alive
from precision_helpers import (
    analytic_inputs,
    assert_claim_metrics_recorded,
    by_label,
    run_context,
    run_experiment,
    write_tiny_model,
)

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "engine": {"kv_pool_bytes": 2**20, "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def ctx(model_dir):
    return run_context("kv-int8", PARAMS, model_dir)


@pytest.mark.slow
def test_capacity_is_analytic_once_for_the_claims_model(ctx):
    frame = ctx.measurements_frame("t")
    values = assert_claim_metrics_recorded("kv-int8", frame)
    # 16 GiB pools of Llama-3.1-8B pages hold 248 int8 and 127 bf16 sequences of 1024 tokens
    # (tests/lab/test_quality_capacity.py works them out by hand).
    assert values["capacity_ratio"] == [248 / 127]
    inputs = analytic_inputs(frame, "capacity_ratio")
    assert inputs["layout"] == {"num_layers": 32, "num_kv_heads": 8, "head_dim": 128}
    assert (inputs["int8"]["num_seqs"], inputs["bf16"]["num_seqs"]) == (248, 127)
    assert inputs["int8"]["pool_bytes"] == inputs["bf16"]["pool_bytes"] == 16 * 2**30
    assert analytic_inputs(frame, "kv_bytes_per_token_ratio") == inputs
    assert not (frame["trial"] > 0)[frame["evidence"] == "analytic"].any()


@pytest.mark.slow
def test_quality_is_measured_on_engines_that_differ_only_in_kv_format(ctx):
    frame = ctx.measurements_frame("t")
    deltas = frame[frame["metric"] == "ppl_delta_pct"]["value"]
    # The int8 cache really quantized: a different perplexity, but not a broken model.
    assert (deltas != 0).all() and (deltas.abs() < 5).all()
    # The tiny served model: 2 layers x 4 K/V rows x 16 dims: bf16 256 B, int8 2 x 4 x 20.
    assert by_label(frame, "served_kv_bytes_per_token") == {"bf16": 256, "int8": 160}
    configs = [{k: v for k, v in c.items() if k != "kv_dtype"} for c in ctx.engine_configs]
    assert len(configs) == 2 and configs[0] == configs[1]
    assert sorted(c["kv_dtype"] for c in ctx.engine_configs) == ["bf16", "int8"]


@pytest.mark.slow
def test_unknown_param_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="pool_byte"):
        run_experiment("kv-int8", {"pool_byte": 1}, tmp_path)


@pytest.mark.slow
def test_never_holds_two_engines(model_dir, monkeypatch):
    built = builds_with_alive("kv-int8", PARAMS, model_dir, monkeypatch)
    assert [(options["kv_dtype"], alive) for options, alive in built] == [("bf16", 0), ("int8", 0)]
