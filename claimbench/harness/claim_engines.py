"""The engines each claim's experiment builds at a profile, as EngineConfig options.

A claim's engine is its profile's ``engine`` params over the run's model and dtype (what
``RunContext.engine`` does); an experiment that compares settings builds one engine per
setting, and the table below names those settings from the experiment's own merged params
(its ``DEFAULT_PARAMS`` under the claim's), using the experiments' own helpers where they
have one. Pool sizes an experiment computes at run time from the served model (kv-dominates,
paged-waste, decode-bandwidth-bound) are computed here the same way from the checked model's
config; a pool sized from the chip's HBM (``hbm_utilization``) is sized when compiled.
Engines an experiment holds at once share a ``group``; one that frees each engine before
building the next (ONE_AT_A_TIME) gives each its own. tpu-check --claims compiles each of
these for the target chip and sums what each group keeps resident (tpu_check_claims.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claimbench.harness.claims import Claim
from claimbench.harness.context import merge_params
from claimbench.harness.draft_models import DRAFT_PARAM, draft_model_name
from claimbench.harness.precision import quality_options
from claimbench.harness.registry import load_experiment
from claimbench.models.config import ModelConfig

Settings = dict[str, dict[str, Any]]  # setting name -> ctx.engine overrides
Variant = Callable[[dict[str, Any], ModelConfig | None], Settings]


def _kv_int8(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    return {kv: quality_options(p, kv_dtype=kv) for kv in ("bf16", "int8")}


def _kv_fp8(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    # kv_fp8.kv_settings: bf16, fp8 at the claim's scale, and fp8 at scale 1.0 when compared.
    settings: Settings = {
        "bf16": quality_options(p, kv_dtype="bf16"),
        "fp8": quality_options(p, kv_dtype="fp8", kv_scale=p["kv_scale"]),
    }
    if p["compare_unit_scale"]:
        settings["fp8-unit-scale"] = quality_options(p, kv_dtype="fp8", kv_scale=1.0)
    return settings


def _fp8_weights(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    return {w: quality_options(p, dtype="bfloat16", weights=w) for w in ("bf16", p["weights"])}


def _levers_multiply(p: dict[str, Any], _: ModelConfig | None) -> Settings:
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


def _bf16_not_fp16(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    # Its float32 side is a layer-by-layer reference (harness/f32_reference.py), not an engine.
    max_len = max(p["window_len"], p["decode_prompt_len"] + p["decode_tokens"]) + 1
    return {
        name: quality_options(
            p, dtype=dtype, kv_dtype="auto", max_model_len=max_len, max_num_seqs=p["decode_batch"]
        )
        for name, dtype in {"bf16": "bfloat16", "fp16": "float16"}.items()
    }


def _tp_refutation(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    return {f"tp={tp}": {"tp": tp} for tp in p["tps"]}


def _continuous_batching(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    return {"": {"max_num_seqs": p["max_num_seqs"], "prefix_caching": "off"}}


def _spec(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    # spec_trials.engine_options: a plain and a speculative engine, one at a time; the
    # speculative one's draft model (its step and pool) is compiled beside it
    # (tpu_check_claims.py), the one its draft_model param names (ClaimEngine.draft).
    batch, k = p["batch"], p["num_spec_tokens"]
    shared = dict(
        max_num_seqs=batch,
        max_num_batched_tokens=max(64, batch * (1 + k)),
        max_model_len=p["input_len"] + p["output_len"],
        prefix_caching="off",
        num_spec_tokens=k,
    )
    return {
        "plain": shared | {"speculative": "none"},
        "speculative": shared | {"speculative": p["proposer"]},
    }


def _moe(p: dict[str, Any], _: ModelConfig | None) -> Settings:
    return {
        "": dict(
            max_num_seqs=p["batch"],
            max_model_len=p["prompt_len"][1] + p["output_len"],
            prefix_caching="off",
        )
    }


def _paged_waste(p: dict[str, Any], cfg: ModelConfig | None) -> Settings:
    options = dict(
        prefix_caching="off",
        page_size=p["page_size"],
        max_model_len=p["max_model_len"],
        max_num_seqs=p["max_num_seqs"],
    )
    if cfg is not None:  # paged_waste._engine: pool_tokens slots and the null page
        num_pages = p["pool_tokens"] // p["page_size"] + 1
        kv_dtype = p["engine"].get("kv_dtype", "auto")
        options["kv_pool_bytes"] = _pool(cfg, kv_dtype, p["page_size"], num_pages, p["engine"])
    return {"": options}


def _kv_dominates(p: dict[str, Any], cfg: ModelConfig | None) -> Settings:
    if not p["measure"]:
        return {}  # analytic only: no engine
    if cfg is None:
        return {"": {}}
    # kv_dominates.measured_sizes: bf16, a pool of exactly batch sequences of context tokens.
    page_size = int(p["engine"].get("page_size", 16))
    num_pages = 1 + p["batch"] * -(-p["context"] // page_size)
    return {
        "": dict(
            dtype="bfloat16",
            kv_dtype="bf16",
            weights="bf16",
            prefix_caching="off",
            page_size=page_size,
            kv_pool_bytes=_pool(cfg, "bf16", page_size, num_pages, {"dtype": "bfloat16"}),
            max_model_len=min(p["context"], cfg.max_position_embeddings),
        )
    }


def _decode_bandwidth_bound(p: dict[str, Any], cfg: ModelConfig | None) -> Settings:
    engine = p["engine"]
    max_batch = max(p["batches"])
    options: dict[str, Any] = dict(
        max_num_seqs=max_batch, prefix_caching="off", async_scheduling=False
    )
    if "kv_pool_bytes" not in engine and cfg is not None:
        page_size = engine.get("page_size", 16)
        pages = max_batch * -(-(p["prompt_len"] + p["output_len"]) // page_size)
        kv_dtype = engine.get("kv_dtype", "auto")
        options["kv_pool_bytes"] = _pool(cfg, kv_dtype, page_size, pages + 1, engine)
    return {"": options}


def _pool(
    cfg: ModelConfig, kv_dtype: str, page_size: int, num_pages: int, engine: dict[str, Any]
) -> int:
    """The experiments' pool arithmetic: ``num_pages`` pages (null page included) of the
    served model in the engine params' KV storage (their dtype, else the run's bf16)."""
    from claimbench.engine.kv_cache import pool_bytes, resolve_kv_dtype

    storage = resolve_kv_dtype(kv_dtype, engine.get("dtype", "bfloat16"))
    return pool_bytes(cfg, storage, page_size, num_pages)


VARIANTS: dict[str, Variant] = {
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
    "kv_dominates": _kv_dominates,
    "decode_bandwidth_bound": _decode_bandwidth_bound,
}
# Experiments that free each engine before building the next (precision.each_engine,
# interleaved_arms.interleaved_trials).
ONE_AT_A_TIME = {
    "bf16_not_fp16",
    "kv_int8",
    "kv_fp8",
    "levers_multiply",
    "spec_decode_gain",
    "spec_vs_batching",
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
    group: int = 0  # engines of one claim in the same group are resident at once
    # A speculative engine's draft (tpu_check.resolve_model: a preset or a directory), from
    # the experiment's draft_model param; None = the engine's own (the shipped tiny draft).
    draft: str | None = None


def claim_engines(
    root: Path, claim: Claim, profile: str, model_cfg: ModelConfig | None = None
) -> list[ClaimEngine]:
    """Every engine ``claim``'s experiment builds at ``profile`` when serving ``model_cfg``
    (None: pools computed from the served model are left at the claim's params). ValueError
    (one line) for params the experiment would refuse (an unknown key)."""
    params = claim_params(root, claim, profile)
    base = dict(params.get("engine") or {})
    name = claim.module_name
    settings = VARIANTS[name](params, model_cfg) if name in VARIANTS else {"": {}}
    model = None
    if name in OWN_MODEL:
        model = params.get(OWN_MODEL[name]) or "claimbench-tiny-moe"
    draft = draft_model_name(params.get(DRAFT_PARAM))
    return [
        ClaimEngine(
            claim.id,
            setting,
            base | overrides,
            model,
            i if name in ONE_AT_A_TIME else 0,
            draft if overrides.get("speculative") == "draft" else None,
        )
        for i, (setting, overrides) in enumerate(settings.items())
    ]


def claim_params(root: Path, claim: Claim, profile: str) -> dict[str, Any]:
    """The experiment's params at ``profile``: its DEFAULT_PARAMS under the claim's."""
    module = load_experiment(root, claim)
    defaults = getattr(module, "DEFAULT_PARAMS", {})
    return merge_params(defaults, claim.profile_params(profile), f"claim {claim.id!r}")
