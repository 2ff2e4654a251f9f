"""tenant-tail-hidden: under FCFS at 90% load, does the pooled p99 TTFT hide a small tenant's?

One big tenant sends ``big_share`` of the requests, ``num_small_tenants`` small tenants split
the rest evenly; every tenant draws from the same length mix, with poisson arrivals. The load
is ``load`` x the saturation output throughput measured first on this engine and mix. Each
trial serves ``duration_s`` seconds of arrivals (a fresh seed per trial) under FCFS, then
compares the worst small tenant's p99 TTFT to the p99 over every completed request pooled.

Params (claims.yaml, per profile): engine (EngineConfig overrides), load, big_share,
num_small_tenants, prompt_len and output_len ([lo, hi] uniform), duration_s,
saturation_requests, timeout_s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.harness import tenant_runs as tr
from claimbench.site import tenant_charts
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "load": 0.9,
    "big_share": 0.7,
    "num_small_tenants": 6,
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "duration_s": 20.0,
    "saturation_requests": 32,
    "timeout_s": 300.0,
}


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """The tenant mix at relative rates (1 request/s in all), bounded by duration_s."""
    lengths = (params["prompt_len"], params["output_len"])
    if not 0 < params["big_share"] < 1:
        raise ValueError(f"param big_share must be in (0, 1), got {params['big_share']!r}")
    num_small = params["num_small_tenants"]
    if not isinstance(num_small, int) or num_small < 1:
        raise ValueError(f"param num_small_tenants must be an integer >= 1, got {num_small!r}")
    small_rate = (1.0 - params["big_share"]) / num_small
    tenants = [tr.poisson_tenant("big", params["big_share"], *lengths)]
    tenants += [tr.poisson_tenant(f"small{i}", small_rate, *lengths) for i in range(num_small)]
    return WorkloadSpec(tuple(tenants), seed=seed, max_duration_s=params["duration_s"])


def hidden_tail(requests: pd.DataFrame) -> dict[str, float]:
    """Worst small tenant's p99 TTFT against the p99 of every request pooled."""
    ttft = tr.observed_ttft_s(requests)
    pooled = tr.percentile(ttft, 99)
    per_tenant = tr.tenant_percentiles(requests, ttft, 99)
    small = {t: v for t, v in per_tenant.items() if t != "big"}
    if not small:
        raise ValueError("no small tenant completed a request")
    worst = max(small.values())
    return {
        "worst_tenant_p99_ttft_over_pooled": tr.ratio(worst, pooled),
        "worst_small_p99_ttft_s": worst,
        "pooled_p99_ttft_s": pooled,
    }


def run(ctx: RunContext) -> None:
    """Record worst_tenant_p99_ttft_over_pooled per trial."""
    params = DEFAULT_PARAMS | ctx.params
    engine = tr.experiment_engine(ctx, params, scheduling_policy="fcfs")
    saturation = tr.measure_saturation(engine, mix(params, ctx.seed), params["saturation_requests"])
    for trial in range(ctx.trials):
        spec = tr.at_load(mix(params, ctx.seed * 1000 + trial + 1), saturation, params["load"])
        requests = tr.workload_requests(spec, engine.model_cfg.vocab_size)
        served = tr.serve(tr.reset_with(engine), requests, params["timeout_s"])
        result = hidden_tail(served.requests)
        labels = {"load": params["load"], "saturation_tok_s": saturation.output_tokens_per_s}
        ctx.record(
            "worst_tenant_p99_ttft_over_pooled",
            result["worst_tenant_p99_ttft_over_pooled"],
            trial=trial,
            unit="x",
            **labels,
        )
        for name in ("worst_small_p99_ttft_s", "pooled_p99_ttft_s"):
            ctx.record(name, result[name], trial=trial, unit="s", **labels)
        ctx.save_frames(requests=served.requests, steps=served.steps, mode="fcfs", trial=trial)


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs of the latest run."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tenant under FCFS")
