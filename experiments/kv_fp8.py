"""kv-fp8: an fp8 (e4m3) KV cache with calibrated per-tensor scales against bf16.

As kv-int8 (experiments/kv_int8.py). Capacity (analytic, once, for the claim's
Llama-3.1-8B-class layout): capacity_ratio = sequences a ``pool_bytes`` fp8 pool holds over
a bf16 one's, by the engine's pool arithmetic (one byte per value; the per-layer
(k_scale, v_scale) pairs paid from the same bytes, outside the pages).

Quality (measured, per trial): the fp8 engine's (k_scale, v_scale) are ``kv_scale``:
"calibrate" (the claim's setting: absmax of K and of V over every layer on one fixed batch of
held-out text, divided by 448, computed by the engine at start-up) or a number;
ppl_delta_pct = 100 * (fp8 perplexity / bf16 perplexity - 1) on each trial's windows, the
engines differing only in the KV format. With ``compare_unit_scale`` a third engine serves
the same windows with both scales 1.0 (no calibration): ppl_delta_pct_unit_scale, what
calibrating buys. The calibrated scales are recorded once (k_scale, v_scale).

The engines serve one at a time: each is built, run over every trial's windows (an unrecorded
warm-up pass first), and freed before the next is built (two 7B engines do not fit one chip
together). Order and drift: perplexity, the claim's metric, depends only on an engine's
numbers and the windows, not on when it runs or how fast the machine is then; the settings'
order is rotated by the run seed (precision.each_engine: each goes first under a different
seed), so a drift in machine speed over a run does not always land on the same setting's
prompt tokens/s, the one timed (supporting) number.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``kv-destroyed``, the fp8
engine's scale is one that keeps nothing (lab/quality/destructive_quantizers.py: DESTROYED_KV, every
value rounded to zero), the engines differing in nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.quality.destructive_quantizers import DESTROYED_KV
from claimbench.lab.quality.precision import (
    CAPACITY_DEFAULTS,
    QUALITY_DEFAULTS,
    passes_per_engine,
    quality_options,
    record_capacity_ratio,
    trial_windows,
)
from claimbench.lab.quality.quality import ppl_delta_pct, top1_agreement_pct

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = (
    QUALITY_DEFAULTS
    | CAPACITY_DEFAULTS
    | {
        "kv_scale": "calibrate",
        "compare_unit_scale": True,
        "counterfactual": counterfactuals.NONE,
    }
)
COUNTERFACTUALS = ("kv-destroyed",)


def kv_settings(params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each setting's KV options: bf16, fp8 at ``kv_scale``, and (``compare_unit_scale``) fp8
    at scale 1.0."""
    settings: dict[str, dict[str, Any]] = {
        "bf16": {"kv_dtype": "bf16"},
        "fp8": {"kv_dtype": "fp8", "kv_scale": params["kv_scale"]},
    }
    if counterfactuals.chosen(params, COUNTERFACTUALS) == "kv-destroyed":
        settings["fp8"] = dict(DESTROYED_KV)
    if params["compare_unit_scale"]:
        settings["fp8-unit-scale"] = {"kv_dtype": "fp8", "kv_scale": 1.0}
    return settings


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """One engine per KV setting (``kv_settings``) serving whole windows, one at a time."""
    options = {name: quality_options(params, **kv) for name, kv in kv_settings(params).items()}
    return EngineSettings(options, one_at_a_time=True)


def run(ctx: RunContext) -> None:
    """Record capacity_ratio once (analytic) and ppl_delta_pct per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    record_capacity_ratio(ctx, params, "fp8")
    windows = [trial_windows(ctx, params, trial) for trial in range(ctx.trials)]
    options = engines(params, None, ctx.dtype).settings

    def record_scales(setting: str, engine: LLMEngine) -> None:
        if setting == "fp8":
            for name, scale in zip(("k_scale", "v_scale"), engine.fp8_kv_scales, strict=True):
                ctx.record(name, scale, trial=0, model=ctx.model_path.name)

    passes = passes_per_engine(ctx, options, windows, on_build=record_scales)
    for trial in range(ctx.trials):
        bf16, fp8 = passes["bf16"][trial], passes["fp8"][trial]
        ctx.record("ppl_delta_pct", ppl_delta_pct(fp8, bf16), trial=trial, unit="%")
        ctx.record("top1_agreement_pct", top1_agreement_pct(fp8, bf16), trial=trial, unit="%")
        if "fp8-unit-scale" in passes:
            delta = ppl_delta_pct(passes["fp8-unit-scale"][trial], bf16)
            ctx.record("ppl_delta_pct_unit_scale", delta, trial=trial, unit="%")
