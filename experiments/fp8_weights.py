"""fp8-weights: weight-only fp8 (e4m3, per-output-channel scales) against bf16 weights.

Two engines serve the same model in bfloat16 (the claim's baseline, whatever --dtype says),
one with every matrix quantized to fp8 (models/quantize.py: the linear layers and the
embedding table / tied head; norms stay bf16). Per trial both serve the trial's held-out
windows as a prompt pass:

* ppl_delta_pct = 100 * (fp8 perplexity / bf16 perplexity - 1);
* top1_agreement_pct = % of positions whose most likely next token is the same in both;
* weight_bytes_ratio = fp8 weight bytes / bf16 weight bytes, as each engine holds them
  (quantized values plus their f32 scales); the same in every trial.

Supporting metrics: weight bytes, perplexity and prompt tokens/s of each setting.
Params: num_windows, window_len, weights (the quantized format, default fp8), ``engine``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from claimbench.harness.precision import (
    QUALITY_DEFAULTS,
    experiment_params,
    quality_engine,
    run_pass,
    save_engine_frames,
    trial_windows,
    warm_up,
)
from claimbench.harness.quality import ppl_delta_pct, top1_agreement_pct

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {"weights": "fp8"}


def run(ctx: RunContext) -> None:
    """Record ppl_delta_pct, top1_agreement_pct, weight_bytes_ratio per trial."""
    params = experiment_params(ctx, DEFAULT_PARAMS)
    if params["weights"] not in ("int8", "fp8"):
        raise ValueError(f"param weights must be int8 or fp8, got {params['weights']!r}")
    engines = {
        setting: quality_engine(ctx, params, dtype="bfloat16", weights=setting)
        for setting in ("bf16", params["weights"])
    }
    base, quant = engines["bf16"], engines[params["weights"]]
    weight_bytes = {setting: e.runner.weight_bytes for setting, e in engines.items()}
    warm_up(engines, trial_windows(ctx, params, 0))
    for trial in range(ctx.trials):
        windows = trial_windows(ctx, params, trial)
        ref = run_pass(ctx, base, windows, trial=trial, setting="bf16")
        cand = run_pass(ctx, quant, windows, trial=trial, setting=params["weights"])
        ctx.record("ppl_delta_pct", ppl_delta_pct(cand, ref), trial=trial, unit="%")
        ctx.record("top1_agreement_pct", top1_agreement_pct(cand, ref), trial=trial, unit="%")
        ratio = weight_bytes[params["weights"]] / weight_bytes["bf16"]
        ctx.record("weight_bytes_ratio", ratio, trial=trial)
        for setting, value in weight_bytes.items():
            ctx.record("weight_bytes", value, trial=trial, unit="bytes", setting=setting)
    save_engine_frames(ctx, engines)
