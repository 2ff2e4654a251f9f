"""Model shapes for the analytic cost model: public checkpoints' exact dims, and the shipped tiny.

Parameter counts are computed from the dims, never typed in, so a wrong dim shows up as a wrong
count (the tests pin each count to the published one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import claimbench.models
from claimbench.models.config import ModelConfig, RopeScaling

TINY_NAME = "claimbench-tiny"
TINY_DIR = Path(claimbench.models.__file__).parent / "assets" / TINY_NAME


@dataclass(frozen=True)
class ModelShape:
    """A Llama-style decoder's dims; MoE when num_experts > 1 (SwiGLU experts, top-k routing)."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # per expert for MoE
    vocab_size: int
    tie_word_embeddings: bool = False
    num_experts: int = 1  # 1 = a dense MLP
    experts_per_token: int = 1
    qkv_bias: bool = False
    o_bias: bool = False
    # config.json's context and RoPE: what the engine checks max_model_len against.
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    # config.json's special ids, where pinned: a draft must share them with its target.
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        for field in (
            "num_layers",
            "hidden_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "num_experts",
            "experts_per_token",
            "max_position_embeddings",
        ):
            if getattr(self, field) <= 0:
                raise ValueError(f"{self.name}: {field} must be > 0, got {getattr(self, field)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.name}: num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"{self.name}: experts_per_token={self.experts_per_token} exceeds "
                f"num_experts={self.num_experts}"
            )

    @property
    def attention_params_per_layer(self) -> int:
        q_dim = self.num_heads * self.head_dim
        kv_dim = self.num_kv_heads * self.head_dim
        params = self.hidden_size * (q_dim + 2 * kv_dim) + q_dim * self.hidden_size
        if self.qkv_bias:
            params += q_dim + 2 * kv_dim
        if self.o_bias:
            params += self.hidden_size
        return params

    @property
    def expert_params(self) -> int:
        """All layers' MLP weights (gate, up, down per expert): the part MoE routing skips."""
        return self.num_layers * self.num_experts * 3 * self.hidden_size * self.intermediate_size

    @property
    def num_params(self) -> int:
        """Every weight: embeddings, attention, MLP/experts, router, RMSNorm scales, LM head."""
        router = self.hidden_size * self.num_experts if self.num_experts > 1 else 0
        norms = 2 * self.hidden_size
        per_layer = self.attention_params_per_layer + router + norms
        embeddings = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embeddings
        return (
            self.num_layers * per_layer
            + self.expert_params
            + embeddings
            + lm_head
            + (
                self.hidden_size  # final norm
            )
        )

    @property
    def num_active_params(self) -> int:
        """Weights one token uses: all but the experts its router does not pick."""
        inactive = self.expert_params * (self.num_experts - self.experts_per_token)
        return self.num_params - inactive // self.num_experts

    @property
    def kv_elements_per_token(self) -> int:
        """K and V values cached per token, over all layers: 2 * layers * kv_heads * head_dim."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim


PRESETS: dict[str, ModelShape] = {
    # meta-llama/Llama-2-13b-hf config.json: 13.0B parameters, full multi-head attention.
    "llama-2-13b": ModelShape(
        name="llama-2-13b",
        num_layers=40,
        hidden_size=5120,
        num_heads=40,
        num_kv_heads=40,
        head_dim=128,
        intermediate_size=13824,
        vocab_size=32000,
        max_position_embeddings=4096,
    ),
    # meta-llama/Llama-3.1-8B config.json: 8.03B parameters, GQA with 8 KV heads.
    "llama-3.1-8b": ModelShape(
        name="llama-3.1-8b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192),
    ),
    # Qwen/Qwen2.5-7B-Instruct config.json: 7.62B parameters, GQA with 4 KV heads, bias on
    # q/k/v (not o), untied embeddings. The full profile's model (claims.yaml full_profile).
    "qwen2.5-7b-instruct": ModelShape(
        name="qwen2.5-7b-instruct",
        num_layers=28,
        hidden_size=3584,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        qkv_bias=True,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        bos_token_id=151643,
        eos_token_id=151645,
    ),
    # Qwen/Qwen2.5-0.5B-Instruct config.json: 0.49B parameters, GQA with 2 KV heads, tied
    # embeddings. The same tokenizer as the 7B (ids < 151,665), with 151,936 embedding rows
    # where the 7B has 152,064: the full profile's speculative draft (claims.yaml params).
    "qwen2.5-0.5b-instruct": ModelShape(
        name="qwen2.5-0.5b-instruct",
        num_layers=24,
        hidden_size=896,
        num_heads=14,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=4864,
        vocab_size=151936,
        tie_word_embeddings=True,
        qkv_bias=True,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        bos_token_id=151643,
        eos_token_id=151645,
    ),
    # meta-llama/Meta-Llama-3-70B config.json: 70.6B parameters, GQA with 8 KV heads.
    "llama-3-70b": ModelShape(
        name="llama-3-70b",
        num_layers=80,
        hidden_size=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    ),
    # mistralai/Mixtral-8x7B-v0.1 config.json: 46.7B parameters in total, 12.9B active
    # (8 experts, top-2 routing per token).
    "mixtral-8x7b": ModelShape(
        name="mixtral-8x7b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        num_experts=8,
        experts_per_token=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
    ),
}

PRESET_NAMES = (*PRESETS, TINY_NAME)


def shape_from_config(name: str, cfg: ModelConfig) -> ModelShape:
    """The ModelShape of an engine ModelConfig (a dense Llama / Qwen2 decoder)."""
    return ModelShape(
        name=name,
        num_layers=cfg.num_layers,
        hidden_size=cfg.hidden_size,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        vocab_size=cfg.vocab_size,
        tie_word_embeddings=cfg.tie_word_embeddings,
        qkv_bias=cfg.qkv_bias,
        o_bias=cfg.o_bias,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        rope_scaling=cfg.rope_scaling,
        rms_norm_eps=cfg.rms_norm_eps,
        bos_token_id=cfg.bos_token_id,
        eos_token_id=cfg.eos_token_id,
    )


def model_config(shape: ModelShape) -> ModelConfig:
    """The engine's ModelConfig for a dense preset's layout, so the engine's own arithmetic
    (KV bytes per token, pages per pool) runs on a model this machine does not serve."""
    if shape.num_experts > 1 or (shape.o_bias and not shape.qkv_bias):
        raise ValueError(f"{shape.name}: only dense Llama / Qwen2 layouts map to a ModelConfig")
    # Bias on q/k/v alone is Qwen2's layout; Llama's attention_bias puts one on o as well.
    qwen2 = shape.qkv_bias and not shape.o_bias
    return ModelConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_layers=shape.num_layers,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        tie_word_embeddings=shape.tie_word_embeddings,
        attention_bias=shape.qkv_bias,
        max_position_embeddings=shape.max_position_embeddings,
        rope_theta=shape.rope_theta,
        rope_scaling=shape.rope_scaling,
        rms_norm_eps=shape.rms_norm_eps,
        bos_token_id=shape.bos_token_id,
        eos_token_id=shape.eos_token_id,
        architecture="Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM",
    )


def tiny_shape(model_dir: Path = TINY_DIR) -> ModelShape:
    """The shipped claimbench-tiny's shape: its config.json, else the config it is trained from."""
    config_path = model_dir / "config.json"
    if config_path.is_file():
        cfg = ModelConfig.from_hf(json.loads(config_path.read_text()))
    else:
        # Not built yet: the dims `claimbench model train` gives it (train imports JAX: late).
        from claimbench.training import train

        cfg = train.TARGET_CONFIG
    return shape_from_config(TINY_NAME, cfg)


def get_preset(name: str) -> ModelShape:
    """The shape for a preset name (see PRESET_NAMES); ValueError naming the known ones."""
    if name == TINY_NAME:
        return tiny_shape()
    if name not in PRESETS:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(PRESET_NAMES)}")
    return PRESETS[name]
