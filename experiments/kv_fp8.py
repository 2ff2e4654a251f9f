"""kv-fp8: an fp8 (e4m3) KV cache with calibrated per-tensor scales against bf16.

As kv-int8 (experiments/kv_int8.py), with the int8 engine replaced by an fp8 one whose
(k_scale, v_scale) are ``kv_scale``: "calibrate" (the claim's setting: absmax of K and of V
over every layer on one fixed batch of held-out text, divided by 448, computed by the engine
at start-up) or a number. The two scales are paid from the pool budget too.
capacity_ratio = fp8 sequences / bf16 sequences in the same ``pool_bytes``;
ppl_delta_pct = 100 * (fp8 perplexity / bf16 perplexity - 1) on each trial's windows.

With ``compare_unit_scale`` a third engine serves the same windows with both scales 1.0
(no calibration), recorded as ppl_delta_pct_unit_scale: what calibrating buys.
Supporting metrics: the scales, each setting's perplexity, tokens/s, bytes per token,
pages and sequences, and top-1 agreement with bf16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from claimbench.harness.precision import (
    QUALITY_DEFAULTS,
    capacity_engines,
    experiment_params,
    record_pool,
    run_pass,
    save_engine_frames,
    trial_windows,
    warm_up,
)
from claimbench.harness.quality import ppl_delta_pct, top1_agreement_pct

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {
    "pool_bytes": 64 * 2**20,
    "seq_len": 256,
    "kv_scale": "calibrate",
    "compare_unit_scale": True,
}


def run(ctx: RunContext) -> None:
    """Record capacity_ratio and ppl_delta_pct (and their supporting numbers) per trial."""
    params = experiment_params(ctx, DEFAULT_PARAMS)
    settings = {
        "bf16": {"kv_dtype": "bf16"},
        "fp8": {"kv_dtype": "fp8", "kv_scale": params["kv_scale"]},
    }
    if params["compare_unit_scale"]:
        settings["fp8-unit-scale"] = {"kv_dtype": "fp8", "kv_scale": 1.0}
    engines, capacity = capacity_engines(ctx, params, settings)
    k_scale, v_scale = engines["fp8"].fp8_kv_scales
    warm_up(engines, trial_windows(ctx, params, 0))
    for trial in range(ctx.trials):
        windows = trial_windows(ctx, params, trial)
        passes = {
            setting: run_pass(ctx, engine, windows, trial=trial, setting=setting)
            for setting, engine in engines.items()
        }
        bf16, fp8 = passes["bf16"], passes["fp8"]
        ctx.record("capacity_ratio", capacity["fp8"] / capacity["bf16"], trial=trial)
        ctx.record("ppl_delta_pct", ppl_delta_pct(fp8, bf16), trial=trial, unit="%")
        ctx.record("top1_agreement_pct", top1_agreement_pct(fp8, bf16), trial=trial, unit="%")
        if "fp8-unit-scale" in passes:
            delta = ppl_delta_pct(passes["fp8-unit-scale"], bf16)
            ctx.record("ppl_delta_pct_unit_scale", delta, trial=trial, unit="%")
        ctx.record("k_scale", k_scale, trial=trial)
        ctx.record("v_scale", v_scale, trial=trial)
        for setting, engine in engines.items():
            record_pool(ctx, engine, capacity[setting], trial=trial, setting=setting)
    save_engine_frames(ctx, engines)
