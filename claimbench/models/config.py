"""Model configuration: the fields of a Hugging Face Llama / Qwen2 config.json we honour.

``ModelConfig.from_hf`` maps config.json exactly (both the classic ``rope_theta`` +
``rope_scaling`` keys and the newer ``rope_parameters`` block); ``to_hf`` writes the
classic form, which every transformers version reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
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
    """A decoder-only Llama / Qwen2 transformer's shape. Hashable, so jit can take it statically."""

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
    eos_token_id: int | None = None

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
        for name in ("bos_token_id", "eos_token_id"):
            tok = getattr(self, name)
            if tok is not None and not 0 <= tok < self.vocab_size:
                raise ValueError(f"{name}={tok} outside vocab of {self.vocab_size}")

    @property
    def model_type(self) -> str:
        return ARCHITECTURES[self.architecture]

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
        rope_params = d.get("rope_parameters") or {}
        rope_theta = d.get("rope_theta", rope_params.get("rope_theta", 10000.0))
        scaling = d.get("rope_scaling") or rope_params
        num_heads = int(d["num_attention_heads"])
        hidden = int(d["hidden_size"])
        head_dim = d.get("head_dim") or hidden // num_heads
        eos = d.get("eos_token_id")
        if isinstance(eos, list):
            # Several stop ids (Llama-3 instruct): the first is the end-of-text id.
            eos = eos[0] if eos else None
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
            eos_token_id=eos,
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
            "eos_token_id": self.eos_token_id,
            "torch_dtype": torch_dtype,
            "use_cache": True,
        }
        if self.architecture == "LlamaForCausalLM":
            d["attention_bias"] = self.attention_bias
            d["mlp_bias"] = False
        else:
            d["use_sliding_window"] = False
        return d
