"""levers-multiply: weight and KV-cache quantization combine as independent levers.

Four engines: bf16 weights + bf16 KV (the base), quantized weights alone (``weights``,
default fp8), a quantized KV cache alone (``kv_dtype``, default int8), and both. They share
one accelerator memory budget in which the bf16 weights take ``weight_share`` (default 0.5,
like Llama-3.1-8B's 16 GB on a 32 GB v6e):

    hbm_bytes = bf16 weight bytes / weight_share
    KV pool of a setting = hbm_bytes - that setting's weight bytes (values + scales)

so shrinking the weights frees pool for KV. Capacity is measured on each engine by filling
its pool with ``seq_len``-token sequences until an allocation fails; gains are capacities
over the base's, and

    multiply_ratio = combined gain / (weight-only gain * KV-only gain)

Quality: each trial's held-out windows go through all four engines; delta_x =
100 * (ppl_x / ppl_base - 1) and ppl_additivity_gap_pct = |delta_both - (delta_w + delta_kv)|
in percentage points. Every engine computes in bfloat16, the claim's baseline.

Supporting metrics: each setting's capacity, pool and weight bytes, perplexity delta and
tokens/s, plus the gains and hbm_bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from claimbench.harness.capacity import fill_capacity
from claimbench.harness.precision import (
    QUALITY_DEFAULTS,
    experiment_params,
    quality_engine,
    record_pool,
    run_pass,
    save_engine_frames,
    trial_windows,
    warm_up,
)
from claimbench.harness.quality import ppl_delta_pct
from claimbench.models.checkpoint import load_model
from claimbench.models.llama import weight_bytes
from claimbench.models.quantize import quantize_weights

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {
    "weights": "fp8",
    "kv_dtype": "int8",
    "weight_share": 0.5,
    "seq_len": 64,
}


def setting_overrides(params: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The four settings' engine options: base, weights only, KV only, both."""
    w, kv = params["weights"], params["kv_dtype"]
    return {
        "base": {"weights": "bf16", "kv_dtype": "bf16"},
        "weights": {"weights": w, "kv_dtype": "bf16"},
        "kv": {"weights": "bf16", "kv_dtype": kv},
        "both": {"weights": w, "kv_dtype": kv},
    }


def run(ctx: RunContext) -> None:
    """Record multiply_ratio and ppl_additivity_gap_pct (and supporting numbers) per trial."""
    params = experiment_params(ctx, DEFAULT_PARAMS)
    if not 0 < params["weight_share"] < 1:
        raise ValueError(f"param weight_share must be in (0, 1), got {params['weight_share']}")
    model, _ = load_model(ctx.model_path, "bfloat16")
    quantized_bytes = weight_bytes(quantize_weights(model, params["weights"]))
    base_bytes = weight_bytes(model)
    del model
    hbm_bytes = int(base_bytes / params["weight_share"])
    max_len = max(params["window_len"] + 1, params["seq_len"])
    engines = {}
    for setting, overrides in setting_overrides(params).items():
        held = quantized_bytes if overrides["weights"] != "bf16" else base_bytes
        engines[setting] = quality_engine(
            ctx,
            params,
            dtype="bfloat16",
            kv_pool_bytes=hbm_bytes - held,
            max_model_len=max_len,
            **overrides,
        )
        if engines[setting].runner.weight_bytes != held:
            raise RuntimeError(
                f"{setting}: the engine holds {engines[setting].runner.weight_bytes} weight "
                f"bytes, the budget subtracted {held}"
            )
    capacity = {setting: fill_capacity(e, params["seq_len"]) for setting, e in engines.items()}
    gains = {s: capacity[s] / capacity["base"] for s in ("weights", "kv", "both")}
    warm_up(engines, trial_windows(ctx, params, 0))
    for trial in range(ctx.trials):
        windows = trial_windows(ctx, params, trial)
        passes = {s: run_pass(ctx, e, windows, trial=trial, setting=s) for s, e in engines.items()}
        delta = {s: ppl_delta_pct(passes[s], passes["base"]) for s in ("weights", "kv", "both")}
        multiply = gains["both"] / (gains["weights"] * gains["kv"])
        gap = abs(delta["both"] - (delta["weights"] + delta["kv"]))
        ctx.record("multiply_ratio", multiply, trial=trial)
        ctx.record("ppl_additivity_gap_pct", gap, trial=trial, unit="pct points")
        ctx.record("hbm_bytes", hbm_bytes, trial=trial, unit="bytes")
        for setting, engine in engines.items():
            record_pool(ctx, engine, capacity[setting], trial=trial, setting=setting)
            held = engine.runner.weight_bytes
            ctx.record("weight_bytes", held, trial=trial, unit="bytes", setting=setting)
            pool = engine.runner.kv_cache_bytes
            ctx.record("kv_pool_bytes", pool, trial=trial, unit="bytes", setting=setting)
            if setting != "base":
                ctx.record("capacity_gain", gains[setting], trial=trial, setting=setting)
                ctx.record("ppl_delta_pct", delta[setting], trial=trial, unit="%", setting=setting)
    save_engine_frames(ctx, engines)
