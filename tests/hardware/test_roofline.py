"""The decode / prefill cost model: the Scaling Book's LLaMA-3-70B case and hand-computed parts."""

from __future__ import annotations

import dataclasses
import json

import pytest

from claimbench.hardware.chips import CHIPS
from claimbench.hardware.model_presets import PRESETS, get_preset, shape_from_config, tiny_shape
from claimbench.hardware.roofline import (
    ServingSetup,
    all_reduce_s,
    critical_batch,
    decode_step,
    estimate,
    expert_fraction_touched,
    kv_bytes_per_token,
    weight_bytes_loaded,
)

LLAMA3_70B = PRESETS["llama-3-70b"]
MIXTRAL = PRESETS["mixtral-8x7b"]


def book_case(**overrides) -> ServingSetup:
    """Scaling Book ch. 8: LLaMA-3-70B, int8 weights and KV, batch 32, 8k context, 4x2 v5e."""
    base = ServingSetup(
        model=LLAMA3_70B,
        chip=CHIPS["v5e"],
        num_chips=8,
        batch=32,
        context=8192,
        weight_dtype="int8",
        kv_dtype="int8",
    )
    return dataclasses.replace(base, **overrides)


def test_scaling_book_llama3_70b_on_8_v5e():
    est = estimate(book_case())
    # The book: 17 ms per step and ~235 tokens/s per chip.
    assert est.step_s == pytest.approx(17e-3, rel=0.10)
    assert est.tokens_per_s_per_chip == pytest.approx(235, rel=0.10)
    # 2 * 8 kv heads * 128 head_dim * 80 layers = 164 kB per token in int8.
    assert est.kv_bytes_per_token == 2 * 8 * 128 * 80
    # "113 GB with the weights": 70.6 GB of int8 weights + 32 * 8192 * 164 kB of KV.
    assert est.bytes_per_step == pytest.approx(113e9, rel=0.02)
    assert est.bound == "memory"
    assert est.fits


def test_scaling_book_4x4_halves_latency_keeps_per_chip_throughput():
    small, big = estimate(book_case()), estimate(book_case(num_chips=16))
    assert big.step_s == pytest.approx(8.6e-3, rel=0.10)
    assert big.tokens_per_s_per_chip == pytest.approx(small.tokens_per_s_per_chip, rel=1e-9)


def test_published_parameter_counts():
    assert PRESETS["llama-2-13b"].num_params == 13_015_864_320
    assert PRESETS["llama-3.1-8b"].num_params == 8_030_261_248
    assert LLAMA3_70B.num_params == 70_553_706_496
    assert MIXTRAL.num_params == 46_702_792_704
    assert MIXTRAL.num_active_params == 12_879_925_248
    assert LLAMA3_70B.num_active_params == LLAMA3_70B.num_params


def test_critical_batch_dense_is_flops_per_byte():
    # bf16 weights and math: 2 bytes per param over 2 FLOPs per param -> peak / BW = 240.5.
    setup = ServingSetup(model=LLAMA3_70B, chip=CHIPS["v5e"])
    assert critical_batch(setup) == pytest.approx(197e12 / 819e9)
    # int8 weights, bf16 math: half the bytes, so half the critical batch.
    int8 = dataclasses.replace(setup, weight_dtype="int8")
    assert critical_batch(int8) == pytest.approx(critical_batch(setup) / 2)


def test_bound_flips_at_critical_batch():
    setup = ServingSetup(model=LLAMA3_70B, chip=CHIPS["v5e"], num_chips=16, context=128)
    crit = critical_batch(setup)
    assert estimate(dataclasses.replace(setup, batch=int(crit) - 1)).bound == "memory"
    assert estimate(dataclasses.replace(setup, batch=int(crit) + 1)).bound == "compute"


def test_moe_weights_loaded_grow_with_batch():
    assert expert_fraction_touched(LLAMA3_70B, 1) == 1.0
    assert expert_fraction_touched(MIXTRAL, 1) == pytest.approx(2 / 8)
    assert expert_fraction_touched(MIXTRAL, 2) == pytest.approx(1 - 0.75**2)
    # One token reads its active weights only.
    assert weight_bytes_loaded(MIXTRAL, "bf16", 1) == pytest.approx(2 * MIXTRAL.num_active_params)
    assert weight_bytes_loaded(MIXTRAL, "bf16", 4096) == pytest.approx(2 * MIXTRAL.num_params)


def test_moe_critical_batch_balances_compute_and_loading():
    setup = ServingSetup(model=MIXTRAL, chip=CHIPS["v6e"], num_chips=4, context=1)
    crit = critical_batch(setup)
    dense_bound = 2 * MIXTRAL.num_params * 918e12 / (2 * MIXTRAL.num_active_params * 1638e9)
    assert crit <= dense_bound
    per_batch = 2 * MIXTRAL.num_active_params / setup.flops_per_s
    loaded_s = weight_bytes_loaded(MIXTRAL, "bf16", crit) / setup.hbm_bytes_per_s
    assert crit * per_batch == pytest.approx(loaded_s, rel=1e-9)


def test_max_batch_and_mfu():
    est = estimate(book_case())
    # Usable 8 * 16 GB * 0.9 = 115.2 GB; minus 70.55 GB of weights; 1.342 GB per sequence.
    assert est.max_batch == 33
    assert est.mfu * est.step_s == pytest.approx(est.compute_s)
    assert est.mfu_at_max_batch > est.mfu
    # 30% reserve: (89.6 GB - 70.55 GB) / 1.342 GB = 14.2 sequences.
    assert estimate(book_case(hbm_reserve_fraction=0.3)).max_batch == 14


def test_weights_that_do_not_fit():
    est = estimate(book_case(num_chips=2))
    assert (est.max_batch, est.fits, est.mfu_at_max_batch) == (0, False, None)


def test_ici_term():
    assert all_reduce_s(1e6, 1, 400e9) == 0.0
    # 8 chips: 2 * 7/8 of 1 MB out at 200 GB/s egress = 8.75 us.
    assert all_reduce_s(1e6, 8, 400e9) == pytest.approx(8.75e-6)
    step = decode_step(book_case(include_ici=True))
    per_reduce = all_reduce_s(32 * 8192 * 2, 8, 400e9)
    assert step.ici_s == pytest.approx(80 * 2 * per_reduce)
    assert decode_step(book_case()).ici_s == 0.0
    assert decode_step(book_case(include_ici=True, num_chips=1)).ici_s == 0.0


def test_prefill_hand_computed():
    est = estimate(book_case())
    flops = 2 * LLAMA3_70B.num_params * 8192 + 2 * 80 * 64 * 128 * 8192**2
    assert est.prefill_s == pytest.approx(flops / (8 * 197e12))  # compute-bound at 8k


def test_kv_bytes_per_token_by_dtype():
    model = PRESETS["llama-3.1-8b"]
    assert kv_bytes_per_token(model, "bf16") == 2 * 32 * 8 * 128 * 2
    assert kv_bytes_per_token(model, "fp8") == kv_bytes_per_token(model, "int8") == 2 * 32 * 8 * 128


def test_cost_per_million_tokens():
    est = estimate(book_case())
    assert est.usd_per_million_tokens == pytest.approx(8 * 1.20 / 3600 / est.tokens_per_s * 1e6)
    gpu = estimate(book_case(chip=CHIPS["h200"], num_chips=2))
    assert gpu.usd_per_million_tokens is None
    json.dumps(est.to_dict())  # plain values only


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"batch": 0}, "batch must be > 0, got 0"),
        ({"num_chips": -1}, "num_chips must be > 0"),
        ({"context": 0}, "context must be > 0"),
        ({"kv_dtype": "fp4"}, "kv dtype 'fp4'"),
        ({"weight_dtype": "f32"}, "weight dtype 'f32'"),
        ({"compute_dtype": "fp8"}, "no published fp8 peak"),
        ({"hbm_reserve_fraction": 1.0}, "hbm_reserve_fraction"),
    ],
)
def test_setup_validation(overrides, message):
    with pytest.raises(ValueError, match=message):
        book_case(**overrides)


def test_tiny_shape_from_config(tmp_path):
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = tiny_shape(tmp_path)
    assert (shape.head_dim, shape.num_kv_heads) == (16, 2)
    # Embeddings (tied) + 2 layers of attention, MLP and 2 norms + the final norm.
    attention = 64 * (64 + 2 * 32) + 64 * 64
    assert shape.num_params == 512 * 64 + 2 * (attention + 3 * 64 * 128 + 2 * 64) + 64
    # Before `claimbench model train` has written config.json: the config it trains from.
    from claimbench.training.train import TARGET_CONFIG

    fallback = tiny_shape(tmp_path / "missing")
    assert fallback == shape_from_config("claimbench-tiny", TARGET_CONFIG)


@pytest.mark.parametrize("architecture", ["LlamaForCausalLM", "Qwen2ForCausalLM"])
def test_param_count_matches_the_engine_model(architecture):
    from flax import nnx

    from claimbench.models.config import ModelConfig
    from claimbench.models.llama import LlamaForCausalLM, param_count

    cfg = ModelConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=48,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        attention_bias=architecture == "LlamaForCausalLM",
        architecture=architecture,
    )
    model = LlamaForCausalLM(cfg, rngs=nnx.Rngs(0))
    assert shape_from_config("t", cfg).num_params == param_count(model)


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown model 'gpt-2'"):
        get_preset("gpt-2")
