"""The MoE block's mechanisms: routing, dropless ragged dispatch against every expert run
densely, the router statistics the engine records, checkpoint round trips and the one-line
refusal of router settings the model does not implement."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.models.checkpoint import ModelLoadError, load_model, read_config, save_model
from claimbench.models.config import ModelConfig
from claimbench.models.moe import (
    Experts,
    MixtralForCausalLM,
    balance_loss,
    experts_touched,
    route,
    with_router_stats,
)

CFG = ModelConfig(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=24,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    architecture="MixtralForCausalLM",
    num_experts=4,
    num_experts_per_tok=2,
    tie_word_embeddings=True,
)


def test_route_picks_top_k_and_renormalises() -> None:
    # softmax([0, ln 2, ln 3, ln 4]) = [1, 2, 3, 4] / 10: top-2 = experts 3, 2 with 4/7, 3/7.
    logits = jnp.log(jnp.asarray([[1.0, 2.0, 3.0, 4.0]]))
    routing = route(logits, 2)
    assert routing.experts.tolist() == [[3, 2]]
    np.testing.assert_allclose(routing.weights, [[4 / 7, 3 / 7]], rtol=1e-6)


def test_experts_touched_counts_distinct_experts_of_real_tokens_only() -> None:
    experts = jnp.asarray([[0, 1], [1, 2], [7, 6]], jnp.int32)
    valid = jnp.asarray([True, True, False])  # the last row is padding
    assert int(experts_touched(experts, valid, 8)) == 3
    assert int(experts_touched(experts, jnp.ones(3, bool), 8)) == 5


def test_balance_loss_is_one_when_uniform_and_grows_when_collapsed() -> None:
    valid = jnp.ones(4, bool)
    # Each token picks a different pair; equal logits: every fraction and prob is 1/4.
    uniform = route(jnp.zeros((4, 4)), 2)._replace(
        experts=jnp.asarray([[0, 1], [2, 3], [1, 0], [3, 2]], jnp.int32)
    )
    assert float(balance_loss(uniform, valid, 4)) == pytest.approx(1.0)
    collapsed = route(jnp.tile(jnp.asarray([[9.0, 9.0, 0.0, 0.0]]), (4, 1)), 2)
    # fractions [1/2, 1/2, 0, 0], probs ~[1/2, 1/2, 0, 0]: 4 * (1/4 + 1/4) = 2.
    assert float(balance_loss(collapsed, valid, 4)) == pytest.approx(2.0, rel=1e-3)


@pytest.mark.slow
def test_ragged_dispatch_equals_every_expert_run_densely() -> None:
    experts = Experts(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (37, CFG.hidden_size))
    # Skewed routing: expert 3 gets no token, expert 0 most of them.
    logits = jax.random.normal(jax.random.PRNGKey(2), (37, 4)) + jnp.asarray([2.0, 1.0, 0, -9])
    routing = route(logits, 2)
    assert 3 not in np.asarray(routing.experts)
    ragged, dense = experts.ragged(x, routing), experts.dense(x, routing)
    np.testing.assert_allclose(ragged, dense, atol=1e-5)
    # And both are the per-token sum of its two experts' SwiGLU outputs.
    w1, w2, w3 = (np.asarray(w[...]) for w in (experts.w1, experts.w2, experts.w3))
    t = 5
    expected = sum(
        float(w) * ((jax.nn.silu(x[t] @ w1[e]) * (x[t] @ w3[e])) @ w2[e])
        for w, e in zip(routing.weights[t], routing.experts[t], strict=True)
    )
    np.testing.assert_allclose(ragged[t], expected, atol=1e-5)


@pytest.mark.slow
def test_ragged_and_dense_models_agree_and_sow_per_layer_stats() -> None:
    model = MixtralForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0))
    dense = MixtralForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0), dispatch="dense")
    ids = jax.random.randint(jax.random.PRNGKey(0), (2, 11), 0, CFG.vocab_size)
    logits, stats = with_router_stats(model.forward_dense, ids)
    np.testing.assert_allclose(logits, dense.forward_dense(ids), atol=1e-4)
    assert stats.experts_touched.shape == (CFG.num_layers,)
    assert stats.balance_loss.shape == (CFG.num_layers,)
    # 22 tokens over 4 experts at random init: every expert is hit in every layer.
    assert stats.experts_touched.tolist() == [4, 4]
    # One token touches exactly its top-2; padding touches none.
    _, stats = with_router_stats(model.forward_dense, ids[:1, :3], jnp.asarray([[1, 0, 0]], bool))
    assert stats.experts_touched.tolist() == [2, 2]
    # Inside jit over a merged graph, as the engine's step calls it.
    graphdef, state = nnx.split(model)

    @jax.jit
    def touched(state, ids):
        return with_router_stats(nnx.merge(graphdef, state).forward_dense, ids)[1].experts_touched

    assert touched(state, ids).tolist() == [4, 4]


@pytest.mark.slow
def test_save_load_round_trip_writes_per_expert_tensors(tmp_path: Path) -> None:
    model = MixtralForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(3))
    save_model(model, CFG, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["num_local_experts"] == 4 and config["model_type"] == "mixtral"
    from safetensors import safe_open

    with safe_open(tmp_path / "model.safetensors", framework="numpy") as f:
        names = set(f.keys())  # noqa: SIM118
        w2 = f.get_tensor("model.layers.1.block_sparse_moe.experts.3.w2.weight")
    assert "model.layers.0.block_sparse_moe.gate.weight" in names
    np.testing.assert_array_equal(w2, np.asarray(model.layers[1].block_sparse_moe.experts.w2[3]).T)
    loaded, cfg = load_model(tmp_path, "float32")
    assert cfg == CFG and isinstance(loaded, MixtralForCausalLM)
    ids = jnp.arange(10)[None] % CFG.vocab_size
    np.testing.assert_array_equal(model.forward_dense(ids), loaded.forward_dense(ids))


def _write_config(tmp_path: Path, **changes) -> Path:
    model = MixtralForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0))
    save_model(model, CFG, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"num_experts_per_tok": 5}, "num_experts_per_tok=5"),
        ({"num_experts_per_tok": 0}, "num_experts_per_tok=0"),
        ({"num_local_experts": 1, "num_experts_per_tok": 1}, "num_local_experts=1"),
        ({"norm_topk_prob": False}, "norm_topk_prob=False"),
        ({"scoring_func": "sigmoid"}, "scoring_func='sigmoid'"),
        ({"n_shared_experts": 2}, "n_shared_experts=2"),
    ],
)
def test_unsupported_router_setting_is_one_line(tmp_path: Path, changes, named: str) -> None:
    path = _write_config(tmp_path, **changes)
    with pytest.raises(ModelLoadError) as info:
        read_config(path)
    assert "unsupported router setting" in str(info.value) and named in str(info.value)
    assert "\n" not in str(info.value)


def test_cli_unsupported_router_setting_exits_2(tmp_path: Path) -> None:
    path = _write_config(tmp_path, num_experts_per_tok=9)
    result = CliRunner().invoke(app, ["--model", str(path), "model", "info", "--windows", "1"])
    assert result.exit_code == 2
    assert "num_experts_per_tok=9" in result.output and "num_local_experts=4" in result.output
    assert "Traceback" not in result.output


def test_dense_config_with_experts_is_refused() -> None:
    with pytest.raises(ValueError, match="has no experts"):
        replace(CFG, architecture="LlamaForCausalLM")


# -- served by the engine -------------------------------------------------------------------

ENGINE_MOE = ModelConfig(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    architecture="MixtralForCausalLM",
    num_experts=4,
    num_experts_per_tok=2,
)


@pytest.fixture(scope="module")
def moe_engine():
    from engine_helpers import tiny_engine

    model = MixtralForCausalLM(ENGINE_MOE, dtype=jnp.float32, rngs=nnx.Rngs(0))
    return model, tiny_engine(model)


@pytest.mark.slow
def test_engine_greedy_tokens_are_the_moe_models_argmax(moe_engine) -> None:
    from engine_helpers import dense_logits

    from claimbench.engine.sampling_params import SamplingParams

    model, engine = moe_engine
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 97, n).tolist() for n in (45, 3, 17)]  # 45: a chunked prefill
    outs = engine.generate(prompts, SamplingParams(max_tokens=10, ignore_eos=True))
    for p, out in zip(prompts, outs, strict=True):
        logits = dense_logits(model, p + out.token_ids)[len(p) - 1 : -1]
        chosen = logits[np.arange(10), out.token_ids]
        np.testing.assert_allclose(chosen, logits.max(-1), atol=1e-4)


def test_step_records_count_experts_touched_by_real_tokens(moe_engine) -> None:
    from claimbench.engine.sampling_params import SamplingParams

    model, engine = moe_engine
    engine.reset()
    engine.generate([[5, 6, 7]], SamplingParams(max_tokens=4, ignore_eos=True))
    steps = engine.steps_frame()
    decode = steps[steps.num_prefill_seqs == 0]
    assert len(decode) == 3 and (decode.num_padding_tokens > 0).all()
    # One real token per decode step: exactly its top-2 in each layer; padding counts none.
    assert all(list(t) == [2, 2] for t in decode.experts_touched)
    engine.reset()
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 97, 4).tolist() for _ in range(8)]
    engine.generate(prompts, SamplingParams(max_tokens=3, ignore_eos=True))
    steps = engine.steps_frame()
    decode = steps[(steps.num_prefill_seqs == 0) & (steps.num_decode_seqs == 8)]
    assert len(decode) > 0
    for touched in decode.experts_touched:
        assert len(touched) == 2 and all(2 <= t <= 4 for t in touched)
    # Eight tokens' choices are counted together: some layer uses more than one token's two.
    assert max(max(t) for t in decode.experts_touched) > 2


def test_dense_model_steps_record_no_experts() -> None:
    from engine_helpers import shared_tiny_engine

    from claimbench.engine.sampling_params import SamplingParams

    engine = shared_tiny_engine()
    engine.generate([[5, 6, 7]], SamplingParams(max_tokens=2, ignore_eos=True))
    assert all(len(t) == 0 for t in engine.steps_frame().experts_touched)


# -- training -------------------------------------------------------------------------------


@pytest.mark.slow
def test_upcycled_moe_routed_to_both_halves_is_the_dense_model(monkeypatch) -> None:
    from engine_helpers import TINY_MODEL

    from claimbench.models.llama import LlamaForCausalLM
    from claimbench.training import moe_train

    dense = LlamaForCausalLM(TINY_MODEL, dtype=jnp.float32, rngs=nnx.Rngs(0))
    cfg = replace(
        TINY_MODEL,
        architecture="MixtralForCausalLM",
        intermediate_size=TINY_MODEL.intermediate_size // 2,
        num_experts=4,
        num_experts_per_tok=2,
    )
    monkeypatch.setattr(moe_train, "UPCYCLE_NOISE", 0.0)
    moe = moe_train.upcycle(dense, cfg, seed=0)
    for layer in moe.layers:  # all experts tie: each token picks 0 and 1 (the two halves), 1/2 each
        gate = layer.block_sparse_moe.gate.kernel
        gate.set_value(jnp.zeros_like(gate[...]))
    ids = jax.random.randint(jax.random.PRNGKey(0), (2, 9), 0, TINY_MODEL.vocab_size)
    np.testing.assert_allclose(moe.forward_dense(ids), dense.forward_dense(ids), atol=1e-4)


def test_moe_train_step_learns_the_router() -> None:
    import optax

    from claimbench.training.moe_train import make_moe_train_step

    model = MixtralForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0), dispatch="dense")
    graphdef, params = nnx.split(model)
    tx = optax.adam(1e-2)
    opt_state = tx.init(params)
    step = make_moe_train_step(graphdef, tx, coef=0.01)
    batch = jnp.tile(jnp.arange(17) % 7 + 3, (2, 1))  # a repeating pattern: learnable
    router_before = np.asarray(model.layers[0].block_sparse_moe.gate.kernel[...])
    losses = []
    for _ in range(15):
        params, opt_state, ce, balance = step(params, opt_state, batch)
        losses.append(float(ce))
        assert 1.0 <= float(balance) <= CFG.num_experts
    assert losses[-1] < losses[0] / 2
    trained = nnx.merge(graphdef, params)
    router_after = np.asarray(trained.layers[0].block_sparse_moe.gate.kernel[...])
    assert np.abs(router_after - router_before).max() > 1e-3


def test_cli_train_moe_bad_input_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["model", "train-moe", "--steps", "0"])
    assert result.exit_code == 2 and "--steps must be > 0" in result.output
    result = CliRunner().invoke(app, ["model", "train-moe", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "needs claimbench-tiny" in result.output
    assert "Traceback" not in result.output


def test_weight_quantization_of_an_moe_is_refused() -> None:
    from claimbench.models.quantize import quantize_weights

    model = MixtralForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0))
    assert quantize_weights(model, "bf16") is model
    with pytest.raises(ValueError, match="not implemented for mixture-of-experts"):
        quantize_weights(model, "int8")
