"""kv-int8: an int8 KV cache (per-token, per-head scales) against bf16 in the same bytes.

Capacity (analytic, once): the claim is about a Llama-3.1-8B-class model (``model``: 32
layers, 8 KV heads, head_dim 128), so capacity_ratio is the engine's own pool arithmetic
(engine/kv/kv_cache.py: int8 values plus one f32 scale per token and K/V head row, whole pages,
the null page) on that layout: the number of ``seq_len``-token sequences a ``pool_bytes``
pool holds in int8 over the number it holds in bf16. Its inputs (layout, page and pool bytes,
pages, sequences) are stored with it. The served model's bytes per token in each format are
a side metric (served_kv_bytes_per_token): at the shipped model's head_dim 64 the scales cost
twice the share they cost at 128.

Quality (measured, per trial): each trial serves its own seeded sample of ``num_windows``
held-out windows of ``window_len`` tokens through a bf16-KV and an int8-KV engine that differ
in nothing else (a prompt pass: paged, chunked prefill), one engine at a time (built, run over
every trial, freed: two 7B engines do not fit one chip together), and
ppl_delta_pct = 100 * (int8 perplexity / bf16 perplexity - 1) over the same windows;
top1_agreement_pct (int8 vs bf16 greedy next token) goes beside it.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``kv-destroyed``, the int8
engine's KV is stored by a quantizer that keeps nothing (lab/quality/destructive_quantizers.py:
DESTROYED_KV, every value rounded to zero), the engines differing in nothing else.

Params (claims.yaml, per profile): num_windows, window_len, model, pool_bytes, page_size,
seq_len, counterfactual, and ``engine`` options of both engines (the full profile sizes each
engine's pool from the chip's HBM: ``hbm_utilization``, tpucompile/pool_fit.py).
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
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = (
    QUALITY_DEFAULTS | CAPACITY_DEFAULTS | {"counterfactual": counterfactuals.NONE}
)
COUNTERFACTUALS = ("kv-destroyed",)


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """A bf16-KV and an int8-KV engine serving whole windows, one at a time."""
    options = {kv: quality_options(params, kv_dtype=kv) for kv in ("bf16", "int8")}
    if counterfactuals.chosen(params, COUNTERFACTUALS) == "kv-destroyed":
        options["int8"] = quality_options(params, **DESTROYED_KV)
    return EngineSettings(options, one_at_a_time=True)


def run(ctx: RunContext) -> None:
    """Record capacity_ratio once (analytic) and ppl_delta_pct per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    record_capacity_ratio(ctx, params, "int8")
    windows = [trial_windows(ctx, params, trial) for trial in range(ctx.trials)]
    options = engines(params, None, ctx.dtype).settings
    passes = passes_per_engine(ctx, options, windows)
    for trial in range(ctx.trials):
        bf16, int8 = passes["bf16"][trial], passes["int8"][trial]
        ctx.record("ppl_delta_pct", ppl_delta_pct(int8, bf16), trial=trial, unit="%")
        ctx.record("top1_agreement_pct", top1_agreement_pct(int8, bf16), trial=trial, unit="%")
