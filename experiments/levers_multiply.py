"""levers-multiply: weight and KV-cache quantization combine as independent levers.

Four settings: bf16 weights + bf16 KV (the base), quantized weights alone (``weights``,
default fp8), a quantized KV cache alone (``kv_dtype``, default int8), and both.

Capacity (analytic, once): capacity is pool arithmetic. For the claim's model layout
(``model``, default Llama-3.1-8B) on an accelerator whose memory the bf16 weights fill to
``weight_share`` (default 0.5, like Llama-3.1-8B's 16 GB on a 32 GB v6e):

    hbm_bytes = bf16 weight bytes / weight_share
    KV pool of a setting = hbm_bytes - that setting's weight bytes (values + scales)
    capacity = sequences of ``seq_len`` tokens that pool holds (engine pool arithmetic)

so shrinking the weights frees pool for KV, and multiply_ratio = combined gain /
(weight-only gain * KV-only gain), which departs from 1 only through page and sequence
rounding and the weights' share. Recorded once with every term as inputs.

Quality (measured, per trial): each trial's held-out windows go through four engines that
differ only in the lever under test (their weight format and KV format; the same pool, pages
and buckets, all computing in bfloat16); delta_x = 100 * (ppl_x / ppl_base - 1) and
ppl_additivity_gap_pct = delta_both - (delta_weights + delta_kv), in percentage points: by how
much the combined cost exceeds the sum of the separate ones (negative when it falls short).

The four engines serve one at a time: each is built, run over every trial's windows (an
unrecorded warm-up pass first), and freed before the next is built (four 7B engines do not
fit one chip together). Order and drift: perplexity, which the claim scores, depends only on
an engine's numbers and the windows, not on when it runs or how fast the machine is then; the
settings' order is rotated by the run seed (precision.each_engine), so a
drift in machine speed over a run does not always land on the same setting's prompt tokens/s,
the one timed (supporting) number.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``levers-interact``, the
combined setting's KV is stored by a quantizer that keeps nothing
(lab/quality/destructive_quantizers.py: DESTROYED_KV) while each lever alone is as registered, so
the combination costs far more than the sum of its parts.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.hardware.model_presets import get_preset, model_config
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.metrics.capacity import pool_capacity, weight_layout_bytes
from claimbench.lab.quality.destructive_quantizers import DESTROYED_KV
from claimbench.lab.quality.precision import (
    QUALITY_DEFAULTS,
    passes_per_engine,
    quality_options,
    trial_windows,
)
from claimbench.lab.quality.quality import ppl_delta_pct

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {
    "weights": "fp8",
    "kv_dtype": "int8",
    "model": "llama-3.1-8b",
    "weight_share": 0.5,
    "page_size": DEFAULT_PAGE_SIZE,
    "seq_len": 1024,
    "counterfactual": counterfactuals.NONE,
}
LEVERS = ("weights", "kv", "both")
COUNTERFACTUALS = ("levers-interact",)


def setting_formats(params: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The four settings' formats: base, weights only, KV only, both."""
    w, kv = params["weights"], params["kv_dtype"]
    return {
        "base": {"weights": "bf16", "kv_dtype": "bf16"},
        "weights": {"weights": w, "kv_dtype": "bf16"},
        "kv": {"weights": "bf16", "kv_dtype": kv},
        "both": {"weights": w, "kv_dtype": kv},
    }


def capacity_gains(params: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """(each lever's capacity gain over the base and multiply_ratio; the formula's inputs)."""
    if not 0 < params["weight_share"] < 1:
        raise ValueError(f"param weight_share must be in (0, 1), got {params['weight_share']}")
    shape = get_preset(params["model"])
    cfg = model_config(shape)
    hbm_bytes = int(weight_layout_bytes(shape, "bf16") / params["weight_share"])
    inputs: dict[str, Any] = {"layout": asdict(shape), "hbm_bytes": hbm_bytes}
    seqs = {}
    for setting, formats in setting_formats(params).items():
        held = weight_layout_bytes(shape, formats["weights"])
        pool = pool_capacity(
            cfg,
            formats["kv_dtype"],
            page_size=params["page_size"],
            pool_bytes=hbm_bytes - held,
            seq_len=params["seq_len"],
        )
        inputs[setting] = {"weight_bytes": held, **pool.inputs()}
        seqs[setting] = pool.num_seqs
    gains = {lever: seqs[lever] / seqs["base"] for lever in LEVERS}
    gains["multiply_ratio"] = gains["both"] / (gains["weights"] * gains["kv"])
    return gains, inputs


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """One bf16 engine per setting's formats serving whole windows, one at a time."""
    options = {
        setting: quality_options(params, dtype="bfloat16", **formats)
        for setting, formats in setting_formats(params).items()
    }
    if counterfactuals.chosen(params, COUNTERFACTUALS) == "levers-interact":
        options["both"] |= DESTROYED_KV
    return EngineSettings(options, one_at_a_time=True)


def run(ctx: RunContext) -> None:
    """Record multiply_ratio once (analytic) and ppl_additivity_gap_pct per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    gains, inputs = capacity_gains(params)
    model = params["model"]
    ctx.record_analytic(
        "multiply_ratio", gains["multiply_ratio"], unit="x", inputs=inputs, model=model
    )
    for lever in LEVERS:
        ctx.record_analytic(
            "capacity_gain", gains[lever], unit="x", inputs=inputs, model=model, setting=lever
        )
    windows = [trial_windows(ctx, params, trial) for trial in range(ctx.trials)]
    options = engines(params, None, ctx.dtype).settings
    passes = passes_per_engine(ctx, options, windows)
    for trial in range(ctx.trials):
        base = passes["base"][trial]
        delta = {lever: ppl_delta_pct(passes[lever][trial], base) for lever in LEVERS}
        gap = delta["both"] - (delta["weights"] + delta["kv"])
        ctx.record("ppl_additivity_gap_pct", gap, trial=trial, unit="pct points")
        for lever in LEVERS:
            ctx.record("lever_ppl_delta_pct", delta[lever], trial=trial, unit="%", setting=lever)
