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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from claimbench.harness.precision import (
    CAPACITY_DEFAULTS,
    QUALITY_DEFAULTS,
    quality_options,
    record_capacity_ratio,
    record_served_kv_bytes,
    run_passes,
    save_engine_frames,
    trial_windows,
    warm_up,
)
from claimbench.harness.quality import ppl_delta_pct, top1_agreement_pct

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = (
    QUALITY_DEFAULTS | CAPACITY_DEFAULTS | {"kv_scale": "calibrate", "compare_unit_scale": True}
)


def run(ctx: RunContext) -> None:
    """Record capacity_ratio once (analytic) and ppl_delta_pct per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    record_capacity_ratio(ctx, params, "fp8")
    settings = {
        "bf16": {"kv_dtype": "bf16"},
        "fp8": {"kv_dtype": "fp8", "kv_scale": params["kv_scale"]},
    }
    if params["compare_unit_scale"]:
        settings["fp8-unit-scale"] = {"kv_dtype": "fp8", "kv_scale": 1.0}
    engines = {
        name: ctx.engine(**quality_options(params, **options)) for name, options in settings.items()
    }
    record_served_kv_bytes(ctx, engines)
    for name, scale in zip(("k_scale", "v_scale"), engines["fp8"].fp8_kv_scales, strict=True):
        ctx.record(name, scale, trial=0, model=ctx.model_path.name)
    warm_up(engines, trial_windows(ctx, params, 0))
    for trial in range(ctx.trials):
        passes = run_passes(ctx, engines, trial_windows(ctx, params, trial), trial=trial)
        bf16, fp8 = passes["bf16"], passes["fp8"]
        ctx.record("ppl_delta_pct", ppl_delta_pct(fp8, bf16), trial=trial, unit="%")
        ctx.record("top1_agreement_pct", top1_agreement_pct(fp8, bf16), trial=trial, unit="%")
        if "fp8-unit-scale" in passes:
            delta = ppl_delta_pct(passes["fp8-unit-scale"], bf16)
            ctx.record("ppl_delta_pct_unit_scale", delta, trial=trial, unit="%")
    save_engine_frames(ctx, engines)
