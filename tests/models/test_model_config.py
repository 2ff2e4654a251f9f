"""ModelConfig <-> Hugging Face config.json mapping."""

from __future__ import annotations

import pytest

from claimbench.models.config import ModelConfig, RopeScaling

LLAMA_32_1B = {  # the fields of meta-llama/Llama-3.2-1B's config.json that matter here
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
QWEN25_05B = {  # Qwen/Qwen2.5-0.5B (no head_dim, no attention_bias: both implied)
    "architectures": ["Qwen2ForCausalLM"],
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_llama_32_fields() -> None:
    cfg = ModelConfig.from_hf(LLAMA_32_1B)
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_layers) == (2048, 8192, 16)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (32, 8, 64)
    assert cfg.rope_theta == 500000.0 and cfg.rms_norm_eps == 1e-5
    assert cfg.rope_scaling == RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)
    assert cfg.tie_word_embeddings and not cfg.qkv_bias and not cfg.o_bias
    assert (cfg.vocab_size, cfg.max_position_embeddings) == (128256, 131072)
    assert (cfg.bos_token_id, cfg.eos_token_id) == (128000, 128001)


def test_qwen25_fields_and_implied_bias() -> None:
    cfg = ModelConfig.from_hf(QWEN25_05B)
    assert cfg.architecture == "Qwen2ForCausalLM" and cfg.model_type == "qwen2"
    assert cfg.head_dim == 896 // 14
    assert cfg.qkv_bias and not cfg.o_bias
    assert cfg.rope_scaling is None and cfg.rope_theta == 1e6


def test_rope_parameters_block_of_newer_transformers() -> None:
    d = {k: v for k, v in LLAMA_32_1B.items() if k not in ("rope_theta", "rope_scaling")}
    d["rope_parameters"] = {**LLAMA_32_1B["rope_scaling"], "rope_theta": 500000.0}
    assert ModelConfig.from_hf(d) == ModelConfig.from_hf(LLAMA_32_1B)


def test_eos_list_keeps_every_stop_id() -> None:
    # Llama-3.1 instruct: a chat turn ends with 128009 (<|eot_id|>), not the first id.
    d = {**LLAMA_32_1B, "eos_token_id": [128001, 128008, 128009]}
    cfg = ModelConfig.from_hf(d)
    assert cfg.eos_token_id == 128001
    assert cfg.stop_token_ids == (128001, 128008, 128009)
    assert cfg.to_hf()["eos_token_id"] == [128001, 128008, 128009]
    assert ModelConfig.from_hf(cfg.to_hf()) == cfg
    assert ModelConfig.from_hf(LLAMA_32_1B).stop_token_ids == (128001,)
    with pytest.raises(ValueError, match="eos_token_id 200000 outside vocab of 128256"):
        ModelConfig.from_hf({**d, "eos_token_id": [128001, 200000]})
    with pytest.raises(ValueError, match="eos_token_id='x' is not a token id"):
        ModelConfig.from_hf({**d, "eos_token_id": "x"})


@pytest.mark.parametrize("d", [LLAMA_32_1B, QWEN25_05B], ids=["llama", "qwen2"])
def test_round_trip(d: dict) -> None:
    cfg = ModelConfig.from_hf(d)
    assert ModelConfig.from_hf(cfg.to_hf()) == cfg


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architectures": ["MistralForCausalLM"]}, "unsupported architecture"),
        ({"architectures": []}, "unsupported architecture"),
        ({"hidden_act": "gelu"}, "unsupported hidden_act 'gelu'"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling type 'yarn'"),
        ({"num_key_value_heads": 5}, "num_heads=32 is not a multiple of num_kv_heads=5"),
        ({"head_dim": 63}, "head_dim must be even"),
        ({"bos_token_id": 999999}, "bos_token_id=999999 outside vocab of 128256"),
    ],
)
def test_rejections_name_the_field(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf({**LLAMA_32_1B, **change})


def test_missing_required_field_is_key_error() -> None:
    d = {k: v for k, v in LLAMA_32_1B.items() if k != "hidden_size"}
    with pytest.raises(KeyError, match="hidden_size"):
        ModelConfig.from_hf(d)


def test_qwen_sliding_window_rejected() -> None:
    with pytest.raises(ValueError, match="use_sliding_window"):
        ModelConfig.from_hf({**QWEN25_05B, "use_sliding_window": True})
