"""fp8-weights: weight-only fp8 (e4m3, per-output-channel scales) against bf16 weights.

Quality (measured, per trial): two engines serve the run's model in bfloat16 (the claim's
baseline, whatever --dtype says), differing only in the weight format: one with every matrix
quantized to ``weights`` (models/quantize.py: the linear layers and the embedding table /
tied head; norms stay bf16). Both serve the trial's held-out windows as a prompt pass:

* ppl_delta_pct = 100 * (quantized perplexity / bf16 perplexity - 1);
* top1_agreement_pct = % of positions whose most likely next token is the same in both.

Bytes (analytic, once): weight_bytes_ratio = quantized / bf16 weight bytes of the ``model``
layout (default Llama-3.1-8B, the series' model) in the engine's layout (one byte per matrix
value plus an f32 scale per output channel; norms in bf16), with the layout's terms as
inputs. The served engines' real weight bytes are a side metric (served_weight_bytes, once):
tests check the formula against them.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``weights-destroyed``, the
quantized engine serves a copy of the model whose every matrix was first rounded to two
values per output channel (lab/quality/destructive_quantizers.py: two_level_checkpoint), then
quantized to ``weights`` as usual; the bf16 engine is unchanged.

Params: num_windows, window_len, weights (int8 | fp8, default fp8), model, counterfactual,
``engine``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from claimbench.hardware.model_presets import get_preset
from claimbench.harness.context import COMPILE_CACHE_DIR
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.metrics.capacity import weight_layout_bytes
from claimbench.lab.quality.destructive_quantizers import two_level_checkpoint
from claimbench.lab.quality.precision import (
    QUALITY_DEFAULTS,
    quality_options,
    run_passes,
    save_engine_frames,
    trial_windows,
    warm_up,
)
from claimbench.lab.quality.quality import ppl_delta_pct, top1_agreement_pct

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {
    "weights": "fp8",
    "model": "llama-3.1-8b",
    "counterfactual": counterfactuals.NONE,
}
COUNTERFACTUALS = ("weights-destroyed",)


def record_bytes_ratio(ctx: RunContext, model: str, weights: str) -> None:
    """weight_bytes_ratio of the ``model`` layout, once, analytic, with its inputs."""
    shape = get_preset(model)
    base, quant = weight_layout_bytes(shape, "bf16"), weight_layout_bytes(shape, weights)
    inputs = {"layout": asdict(shape), "bf16_bytes": base, f"{weights}_bytes": quant}
    ctx.record_analytic("weight_bytes_ratio", quant / base, unit="x", inputs=inputs, model=model)


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """A bf16-weight and a quantized-weight engine in bf16, both held at once."""
    return EngineSettings(
        {
            setting: quality_options(params, dtype="bfloat16", weights=setting)
            for setting in ("bf16", params["weights"])
        }
    )


def run(ctx: RunContext) -> None:
    """Record weight_bytes_ratio once (analytic); ppl_delta_pct, top1_agreement_pct per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    quantized = params["weights"]
    if quantized not in ("int8", "fp8"):
        raise ValueError(f"param weights must be int8 or fp8, got {quantized!r}")
    record_bytes_ratio(ctx, params["model"], quantized)
    settings = engines(params, None, ctx.dtype).settings
    if counterfactuals.chosen(params, COUNTERFACTUALS) == "weights-destroyed":
        # In the compile cache, kept by content: provenance hashes it after the run.
        destroyed = two_level_checkpoint(ctx.model_path, COMPILE_CACHE_DIR / "two-level-models")
        settings[quantized] = settings[quantized] | {"model_path": destroyed}
    built = {setting: ctx.engine(**options) for setting, options in settings.items()}
    for setting, engine in built.items():
        held = engine.stats().weight_bytes
        ctx.record(
            "served_weight_bytes",
            held,
            trial=0,
            unit="bytes",
            setting=setting,
            model=ctx.model_path.name,
        )
    warm_up(built, trial_windows(ctx, params, 0))
    for trial in range(ctx.trials):
        passes = run_passes(ctx, built, trial_windows(ctx, params, trial), trial=trial)
        ref, cand = passes["bf16"], passes[quantized]
        ctx.record("ppl_delta_pct", ppl_delta_pct(cand, ref), trial=trial, unit="%")
        ctx.record("top1_agreement_pct", top1_agreement_pct(cand, ref), trial=trial, unit="%")
    save_engine_frames(ctx, built)
