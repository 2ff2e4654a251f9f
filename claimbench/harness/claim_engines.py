"""The engines each claim's experiment builds at a profile, as EngineConfig options.

A claim's engine is its profile's ``engine`` params over the run's model and dtype (what
``RunContext.engine`` does); an experiment that compares settings builds one engine per
setting, and the table below names those settings from the experiment's own merged params
(its ``DEFAULT_PARAMS`` under the claim's), using the experiments' own helpers where they
have one. Pool sizes an experiment computes at run time from the served model (kv-dominates,
paged-waste, decode-bandwidth-bound) are not reproduced: the claim's ``engine`` params are.
tpu-check --claims compiles each of these for the target chip (tpu_check_claims.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claimbench.harness.claims import Claim
from claimbench.harness.context import merge_params
from claimbench.harness.precision import quality_options
from claimbench.harness.registry import load_experiment

Settings = dict[str, dict[str, Any]]  # setting name -> ctx.engine overrides


def _kv_int8(p: dict[str, Any]) -> Settings:
    return {kv: quality_options(p, kv_dtype=kv) for kv in ("bf16", "int8")}


def _kv_fp8(p: dict[str, Any]) -> Settings:
    return {kv: quality_options(p, kv_dtype=kv) for kv in ("bf16", "fp8")}


def _fp8_weights(p: dict[str, Any]) -> Settings:
    return {w: quality_options(p, dtype="bfloat16", weights=w) for w in ("bf16", p["weights"])}


def _levers_multiply(p: dict[str, Any]) -> Settings:
    formats = {
        "base": ("bf16", "bf16"),
        "weights": (p["weights"], "bf16"),
        "kv": ("bf16", p["kv_dtype"]),
        "both": (p["weights"], p["kv_dtype"]),
    }
    return {
        name: quality_options(p, dtype="bfloat16", weights=w, kv_dtype=kv)
        for name, (w, kv) in formats.items()
    }


def _bf16_not_fp16(p: dict[str, Any]) -> Settings:
    dtypes = {"f32": "float32", "bf16": "bfloat16", "fp16": "float16"}
    return {name: quality_options(p, dtype=dtype) for name, dtype in dtypes.items()}


def _tp_refutation(p: dict[str, Any]) -> Settings:
    return {f"tp={tp}": {"tp": tp} for tp in p["tps"]}


def _continuous_batching(p: dict[str, Any]) -> Settings:
    return {"": {"max_num_seqs": p["max_num_seqs"], "prefix_caching": "off"}}


def _spec(p: dict[str, Any]) -> Settings:
    # The target model's step at the verify shape; the draft model's own step is not checked.
    batch, k = p["batch"], p["num_spec_tokens"]
    return {
        "": dict(
            max_num_seqs=batch,
            max_num_batched_tokens=max(64, batch * (1 + k)),
            max_model_len=p["input_len"] + p["output_len"],
            num_spec_tokens=k,
        )
    }


def _moe(p: dict[str, Any]) -> Settings:
    return {
        "": dict(
            max_num_seqs=p["batch"],
            max_model_len=p["prompt_len"][1] + p["output_len"],
            prefix_caching="off",
        )
    }


def _paged_waste(p: dict[str, Any]) -> Settings:
    return {
        "": dict(
            page_size=p["page_size"],
            max_model_len=p["max_model_len"],
            max_num_seqs=p["max_num_seqs"],
        )
    }


VARIANTS: dict[str, Callable[[dict[str, Any]], Settings]] = {
    "kv_int8": _kv_int8,
    "kv_fp8": _kv_fp8,
    "fp8_weights": _fp8_weights,
    "levers_multiply": _levers_multiply,
    "bf16_not_fp16": _bf16_not_fp16,
    "tp_refutation": _tp_refutation,
    "continuous_batching": _continuous_batching,
    "spec_decode_gain": _spec,
    "spec_vs_batching": _spec,
    "moe_disqualified": _moe,
    "paged_waste": _paged_waste,
}
# Experiments that serve a model of their own rather than the run's (--model).
OWN_MODEL = {"moe_disqualified": "moe_model"}


@dataclass(frozen=True)
class ClaimEngine:
    """One engine a claim's experiment builds."""

    claim_id: str
    setting: str  # "" when the experiment builds one engine
    options: dict[str, Any] = field(default_factory=dict)  # EngineConfig kwargs (no model_path)
    model: str | None = None  # a model of the experiment's own (name or dir); None = the run's


def claim_engines(root: Path, claim: Claim, profile: str) -> list[ClaimEngine]:
    """Every engine ``claim``'s experiment builds at ``profile``. ValueError (one line) for
    params the experiment would refuse (an unknown key)."""
    module = load_experiment(root, claim)
    defaults = getattr(module, "DEFAULT_PARAMS", {})
    params = merge_params(defaults, claim.profile_params(profile), f"claim {claim.id!r}")
    base = dict(params.get("engine") or {})
    name = claim.module_name
    settings = VARIANTS[name](params) if name in VARIANTS else {"": {}}
    model = None
    if name in OWN_MODEL:
        model = params.get(OWN_MODEL[name]) or "claimbench-tiny-moe"
    return [
        ClaimEngine(claim.id, setting, base | overrides, model)
        for setting, overrides in settings.items()
    ]
