"""Model configuration: the fields of a Hugging Face Llama / Qwen2 / Mixtral config.json we use.

``ModelConfig.from_hf`` maps config.json exactly (both the classic ``rope_theta`` +
``rope_scaling`` keys and the newer ``rope_parameters`` block); ``to_hf`` writes the
classic form, which every transformers version reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "MixtralForCausalLM": "mixtral",
}
MOE_ARCHITECTURES = ("MixtralForCausalLM",)
ROPE_TYPES = ("default", "llama3", "linear")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling: "llama3" (Llama-3.1 wavelength bands) or "linear"."""

    rope_type: str
    factor: float
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_position_embeddings: int = 8192  # llama3 only

    def __post_init__(self) -> None:
        if self.rope_type not in ("llama3", "linear"):
            raise ValueError(f"unsupported rope_scaling type {self.rope_type!r}")
        if self.factor <= 0:
            raise ValueError(f"rope_scaling factor must be > 0, got {self.factor}")
        if self.rope_type == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                f"rope_scaling high_freq_factor={self.high_freq_factor} must exceed "
                f"low_freq_factor={self.low_freq_factor}"
            )

    @classmethod
    def from_hf(cls, d: dict[str, Any] | None) -> RopeScaling | None:
        """A config.json ``rope_scaling`` / ``rope_parameters`` dict -> RopeScaling or None."""
        if not d:
            return None
        rope_type = d.get("rope_type", d.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"unsupported rope_scaling type {rope_type!r}")
        if rope_type == "default":
            return None
        if rope_type == "linear":
            return cls("linear", float(d["factor"]))
        return cls(
            "llama3",
            float(d["factor"]),
            float(d["low_freq_factor"]),
            float(d["high_freq_factor"]),
            int(d["original_max_position_embeddings"]),
        )

    def to_hf(self) -> dict[str, Any]:
        if self.rope_type == "linear":
            return {"rope_type": "linear", "factor": self.factor}
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only Llama / Qwen2 / Mixtral transformer's shape. Hashable, so jit can take it
    statically. Mixtral: ``intermediate_size`` is each expert's, ``num_experts`` > 1."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v (and o for Llama, as in transformers)
    max_position_embeddings: int = 2048
    architecture: str = "LlamaForCausalLM"
    bos_token_id: int | None = None
    eos_token_id: int | None = None  # the end-of-text id: the first of config.json's list
    # Every id that ends generation: config.json's eos_token_id list, or generation_config.json's
    # (checkpoint.read_config). Empty -> (eos_token_id,) when there is one.
    stop_token_ids: tuple[int, ...] = ()
    num_experts: int = 0  # Mixtral's num_local_experts; 0 = a dense MLP
    num_experts_per_tok: int = 0  # top-k of the router; 0 = a dense MLP
    router_aux_loss_coef: float = 0.0  # training only: the load-balancing loss weight

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {self.architecture!r}; expected one of "
                f"{', '.join(ARCHITECTURES)}"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        moe = self.architecture in MOE_ARCHITECTURES
        top_k_ok = 1 <= self.num_experts_per_tok <= self.num_experts
        if moe and (self.num_experts < 2 or not top_k_ok):
            raise ValueError(
                f"unsupported router setting num_local_experts={self.num_experts} "
                f"num_experts_per_tok={self.num_experts_per_tok}; expected "
                "1 <= num_experts_per_tok <= num_local_experts and num_local_experts >= 2"
            )
        if not moe and (self.num_experts or self.num_experts_per_tok):
            raise ValueError(
                f"{self.architecture} has no experts, got num_experts={self.num_experts}"
            )
        for name in ("bos_token_id", "eos_token_id"):
            tok = getattr(self, name)
            if tok is not None and not 0 <= tok < self.vocab_size:
                raise ValueError(f"{name}={tok} outside vocab of {self.vocab_size}")
        if not self.stop_token_ids and self.eos_token_id is not None:
            object.__setattr__(self, "stop_token_ids", (self.eos_token_id,))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for tok in self.stop_token_ids:
            if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok < self.vocab_size:
                raise ValueError(f"eos_token_id {tok!r} outside vocab of {self.vocab_size}")

    @property
    def model_type(self) -> str:
        return ARCHITECTURES[self.architecture]

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def qkv_bias(self) -> bool:
        """Qwen2 always has q/k/v bias; Llama has it when attention_bias is set."""
        return self.architecture == "Qwen2ForCausalLM" or self.attention_bias

    @property
    def o_bias(self) -> bool:
        """Llama's attention_bias also puts a bias on o_proj; Qwen2's o_proj never has one."""
        return self.architecture == "LlamaForCausalLM" and self.attention_bias

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a parsed config.json. Raises ValueError naming the unsupported field."""
        archs = d.get("architectures") or []
        if len(archs) != 1 or archs[0] not in ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {archs!r}; expected one of {', '.join(ARCHITECTURES)}"
            )
        arch = archs[0]
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {d['hidden_act']!r}; expected 'silu'")
        if d.get("mlp_bias", False):
            raise ValueError("unsupported mlp_bias=true")
        if d.get("use_sliding_window", False):
            raise ValueError("unsupported use_sliding_window=true")
        if arch in MOE_ARCHITECTURES and d.get("sliding_window") is not None:
            raise ValueError(f"unsupported sliding_window={d['sliding_window']}; expected null")
        experts = _router_fields(d) if arch in MOE_ARCHITECTURES else {}
        rope_params = d.get("rope_parameters") or {}
        rope_theta = d.get("rope_theta", rope_params.get("rope_theta", 10000.0))
        scaling = d.get("rope_scaling") or rope_params
        num_heads = int(d["num_attention_heads"])
        hidden = int(d["hidden_size"])
        head_dim = d.get("head_dim") or hidden // num_heads
        # One id or several (Llama-3.1 instruct: end of text, of a message, of a turn): every
        # one ends generation; the first is the end-of-text id.
        stop_ids = stop_token_ids(d.get("eos_token_id"), "eos_token_id")
        return cls(
            vocab_size=int(d["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(d["intermediate_size"]),
            num_layers=int(d["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=int(d.get("num_key_value_heads") or num_heads),
            head_dim=int(head_dim),
            rope_theta=float(rope_theta),
            rope_scaling=RopeScaling.from_hf(scaling),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            attention_bias=bool(d.get("attention_bias", arch == "Qwen2ForCausalLM")),
            max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
            architecture=arch,
            bos_token_id=d.get("bos_token_id"),
            eos_token_id=stop_ids[0] if stop_ids else None,
            stop_token_ids=stop_ids,
            **experts,
        )

    def to_hf(self, torch_dtype: str = "float32") -> dict[str, Any]:
        """The config.json dict transformers reads for this model."""
        d: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling.to_hf() if self.rope_scaling else None,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": (
                list(self.stop_token_ids) if len(self.stop_token_ids) > 1 else self.eos_token_id
            ),
            "torch_dtype": torch_dtype,
            "use_cache": True,
        }
        if self.architecture == "LlamaForCausalLM":
            d["attention_bias"] = self.attention_bias
            d["mlp_bias"] = False
        elif self.architecture == "Qwen2ForCausalLM":
            d["use_sliding_window"] = False
        else:
            d["num_local_experts"] = self.num_experts
            d["num_experts_per_tok"] = self.num_experts_per_tok
            d["router_aux_loss_coef"] = self.router_aux_loss_coef
            d["router_jitter_noise"] = 0.0
            d["output_router_logits"] = False
            d["sliding_window"] = None
        return d


def stop_token_ids(value: Any, name: str) -> tuple[int, ...]:
    """A config's ``eos_token_id`` (null, one id or a list of ids) -> the ids; ValueError
    naming ``name`` and the value if it is neither."""
    ids = [] if value is None else value if isinstance(value, list) else [value]
    if any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
        raise ValueError(f"{name}={value!r} is not a token id or a list of token ids")
    return tuple(ids)


# Routing that is not Mixtral's (softmax over every expert, top-k, renormalised; no shared
# expert): serving such a checkpoint as Mixtral would give wrong tokens, so it is refused.
_ROUTER_REQUIRED = {"norm_topk_prob": True, "scoring_func": "softmax", "topk_method": "greedy"}
_ROUTER_ABSENT = ("n_shared_experts", "shared_expert_intermediate_size", "n_group", "topk_group")


def _router_fields(d: dict[str, Any]) -> dict[str, Any]:
    """A Mixtral config.json's router -> ModelConfig fields; ValueError naming any setting the
    router does not implement."""
    for key, expected in _ROUTER_REQUIRED.items():
        if key in d and d[key] != expected:
            raise ValueError(f"unsupported router setting {key}={d[key]!r}; expected {expected!r}")
    for key in _ROUTER_ABSENT:
        if d.get(key):
            raise ValueError(f"unsupported router setting {key}={d[key]!r}; expected none")
    return {
        "num_experts": int(d.get("num_local_experts", 8)),
        "num_experts_per_tok": int(d.get("num_experts_per_tok", 2)),
        "router_aux_loss_coef": float(d.get("router_aux_loss_coef", 0.0)),
    }
