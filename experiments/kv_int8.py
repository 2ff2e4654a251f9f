"""kv-int8: an int8 KV cache (per-token, per-head scales) against bf16 in the same bytes.

Two engines share one KV budget (``pool_bytes``): a bf16 cache and an int8 cache whose f32
scales (one per token and K/V head row) sit beside the pages and are paid from the same
budget. Capacity is measured on each engine by filling its pool with ``seq_len``-token
sequences until an allocation fails; capacity_ratio = int8 sequences / bf16 sequences. It
depends only on the byte layout, so it is the same in every trial.

Quality: each trial serves its own seeded sample of ``num_windows`` held-out windows of
``window_len`` tokens through both engines (a prompt pass: paged, chunked prefill) and
ppl_delta_pct = 100 * (int8 perplexity / bf16 perplexity - 1) over the same windows.
Supporting metrics: each setting's perplexity, prompt tokens/s, KV bytes per token, pages
and sequences, and the int8 pass's top-1 agreement with bf16.

Params (claims.yaml, per profile): num_windows, window_len, pool_bytes, seq_len, and
``engine`` options (e.g. max_num_batched_tokens).
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

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {"pool_bytes": 64 * 2**20, "seq_len": 256}
SETTINGS = {"bf16": {"kv_dtype": "bf16"}, "int8": {"kv_dtype": "int8"}}


def run(ctx: RunContext) -> None:
    """Record capacity_ratio and ppl_delta_pct (and their supporting numbers) per trial."""
    params = experiment_params(ctx, DEFAULT_PARAMS)
    engines, capacity = capacity_engines(ctx, params, SETTINGS)
    warm_up(engines, trial_windows(ctx, params, 0))
    for trial in range(ctx.trials):
        windows = trial_windows(ctx, params, trial)
        bf16 = run_pass(ctx, engines["bf16"], windows, trial=trial, setting="bf16")
        int8 = run_pass(ctx, engines["int8"], windows, trial=trial, setting="int8")
        ctx.record("capacity_ratio", capacity["int8"] / capacity["bf16"], trial=trial)
        ctx.record("ppl_delta_pct", ppl_delta_pct(int8, bf16), trial=trial, unit="%")
        ctx.record("top1_agreement_pct", top1_agreement_pct(int8, bf16), trial=trial, unit="%")
        for setting, engine in engines.items():
            record_pool(ctx, engine, capacity[setting], trial=trial, setting=setting)
    save_engine_frames(ctx, engines)
