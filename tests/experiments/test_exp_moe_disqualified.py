"""moe-disqualified at tiny size: the ratios once, analytic, for Llama-3.1-8B on a v6e; experts
touched per decode step at batch 32 measured from the served model's router."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax.numpy as jnp
import pytest
from flax import nnx
from precision_helpers import analytic_inputs, assert_claim_metrics_recorded, run_experiment

from claimbench.models.checkpoint import default_model_path, save_model
from claimbench.models.config import ModelConfig
from claimbench.models.moe import MixtralForCausalLM
from claimbench.models.tokenizer import TOKENIZER_FILE, Tokenizer

PARAMS = {
    "batch": 32,
    "prompt_len": [4, 12],
    "output_len": 5,
    "engine": {"kv_pool_bytes": 2**21, "page_size": 8},
}


def write_tiny_moe(path: Path, *, collapsed: bool) -> Path:
    """A 2-layer random 8-expert top-2 MoE with the shipped tokenizer, in bf16. ``collapsed``:
    every router weight zero, so all experts tie and every token picks experts 0 and 1."""
    tokenizer = Tokenizer.from_dir(default_model_path())
    cfg = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
        architecture="MixtralForCausalLM",
        num_experts=8,
        num_experts_per_tok=2,
    )
    model = MixtralForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
    if collapsed:
        for layer in model.layers:
            gate = layer.block_sparse_moe.gate.kernel
            gate.set_value(jnp.zeros_like(gate[...]))
    save_model(model, cfg, path, dtype="bfloat16")
    shutil.copy(default_model_path() / TOKENIZER_FILE, path / TOKENIZER_FILE)
    return path


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    path = write_tiny_moe(tmp_path_factory.mktemp("moe"), collapsed=False)
    return run_experiment("moe-disqualified", {**PARAMS, "moe_model": str(path)}, path)


@pytest.mark.slow
def test_ratios_are_analytic_once_for_llama_3_1_8b_on_v6e(frame) -> None:
    values = assert_claim_metrics_recorded("moe-disqualified", frame)
    # Llama-3.1-8B: 8,030,261,248 params; its MLPs 32 * 3 * 4096 * 14336 = 5,637,144,576.
    # The twin: experts 8 * 3 * 4096 * 7168 per layer = 4x the MLPs, plus a 4096 x 8 router
    # per layer: 8,030,261,248 + 3 * 5,637,144,576 + 1,048,576 = 24,942,743,552 params.
    assert values["weight_ratio"] == [24_942_743_552 / 8_030_261_248]
    # v6e: 32e9 bytes of HBM; the twin's 49.9e9 bf16 bytes overflow it: no KV room at all.
    assert values["kv_room_ratio"] == [0.0]
    inputs = analytic_inputs(frame, "weight_ratio")
    assert inputs["moe_layout"]["intermediate_size"] == 7168 and inputs["chip"] == "v6e"
    # Equal active parameters but for the routers.
    assert inputs["moe_active_params"] - inputs["dense_active_params"] == 32 * 4096 * 8
    room = frame[frame["metric"] == "dense_kv_room_bytes"]["value"].item()
    assert room == 32e9 - 2 * 8_030_261_248


@pytest.mark.slow
def test_experts_touched_is_measured_per_step_from_the_router(frame) -> None:
    touched = frame[frame["metric"] == "experts_touched_pct_b32"]
    mean = frame[frame["metric"] == "experts_touched_mean_pct_b32"]["value"]
    assert set(touched["evidence"]) == {"cpu"}
    # 32 tokens at random init route widely: above the 25% one token's top-2 would give.
    assert (touched["value"] > 25).all() and (touched["value"] <= 100).all()
    assert (mean.to_numpy() >= touched["value"].to_numpy()).all()


@pytest.mark.slow
def test_a_collapsed_router_touches_two_of_eight_experts(tmp_path: Path) -> None:
    path = write_tiny_moe(tmp_path / "collapsed", collapsed=True)
    frame = run_experiment("moe-disqualified", {**PARAMS, "moe_model": str(path)}, path)
    # Every token picks experts 0 and 1 in every layer: 2 of 8, whatever the batch; the
    # uniform-routing formula would say 1 - 0.75^32 = 99.99%.
    for metric in ("experts_touched_pct_b32", "experts_touched_mean_pct_b32"):
        assert frame[frame["metric"] == metric]["value"].tolist() == [25.0, 25.0]
    uniform = frame[frame["metric"] == "experts_touched_pct_uniform_b32"]["value"].item()
    assert uniform == pytest.approx(100 * (1 - 0.75**32))


def test_a_dense_model_is_refused(tmp_path: Path) -> None:
    params = {**PARAMS, "moe_model": str(default_model_path())}
    with pytest.raises(ValueError, match="not a mixture of experts"):
        run_experiment("moe-disqualified", params, default_model_path())


def test_bad_prompt_len_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prompt_len"):
        run_experiment("moe-disqualified", {**PARAMS, "prompt_len": [9, 3]}, tmp_path)
