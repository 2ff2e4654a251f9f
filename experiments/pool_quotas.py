"""pool-quotas: do per-tenant KV quotas protect a quiet tenant from a noisy one?

A quiet tenant sends short requests, a noisy one long requests, into a KV pool that holds
``pool_requests`` of the noisy kind at once, so pages (not the sequence limit) bind. Rates
are set from the saturation output throughput measured first on the noisy mix: the noisy
tenant offers ``noisy_load`` x saturation, the quiet one ``quiet_load`` x saturation. Each
trial serves the same arrivals three times under FCFS, in an order that rotates from trial to
trial: the quiet tenant alone, both in a
fully shared pool, and both with quotas: the quiet tenant guaranteed ``quiet_guarantee`` of
the pool (the rest is the shared burst region, which the noisy tenant may fill). Runs stop
``drain_s`` after the last arrival; a quiet request still waiting then counts the time it
had waited (a lower bound on its TTFT).

Metrics: quota_p99_ratio and shared_p99_ratio, the quiet tenant's p99 TTFT beside the noisy
tenant (with quotas, shared) over its p99 TTFT alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from claimbench.engine.tenants import Tenant
from claimbench.harness import tenant_runs as tr
from claimbench.site import tenant_charts
from claimbench.workload.spec import WorkloadSpec
from claimbench.workload.tenants import TenantLoad

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "pool_requests": 4,
    "quiet_guarantee": 0.25,
    "noisy_load": 1.5,
    "quiet_load": 0.1,
    "quiet_prompt_len": [16, 32],
    "quiet_output_len": [8, 16],
    "noisy_prompt_len": [64, 128],
    "noisy_output_len": [48, 96],
    "duration_s": 12.0,
    "drain_s": 6.0,
    "saturation_requests": 24,
}
QUIET, NOISY = "quiet", "noisy"
MODES = ("alone", "shared", "quota")


def tenant_load(name: str, rate: float, params: dict[str, Any]) -> TenantLoad:
    return tr.poisson_tenant(name, rate, params[f"{name}_prompt_len"], params[f"{name}_output_len"])


def noisy_mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    tenants = (tenant_load(NOISY, 1.0, params),)
    return WorkloadSpec(tenants, seed=seed, max_requests=params["saturation_requests"])


def trial_mix(params: dict[str, Any], saturation: tr.Saturation, seed: int) -> WorkloadSpec:
    """Both tenants at their loads: rate = load x saturation tokens/s / mean output tokens."""
    tenants = []
    for name in (QUIET, NOISY):
        load = params[f"{name}_load"]
        if not load > 0:
            raise ValueError(f"param {name}_load must be > 0, got {load!r}")
        lo, hi = params[f"{name}_output_len"]
        rate = load * saturation.output_tokens_per_s / ((lo + hi) / 2)
        tenants.append(tenant_load(name, rate, params))
    return WorkloadSpec(tuple(tenants), seed=seed, max_duration_s=params["duration_s"])


def pool_pages(params: dict[str, Any]) -> int:
    page_size = params["engine"].get("page_size", 16)
    longest = params["noisy_prompt_len"][1] + params["noisy_output_len"][1]
    return params["pool_requests"] * -(-longest // page_size)


def run(ctx: RunContext) -> None:
    """Record quota_p99_ratio and shared_p99_ratio per trial."""
    params = DEFAULT_PARAMS | ctx.params
    if not 0 < params["quiet_guarantee"] < 1:
        raise ValueError(
            f"param quiet_guarantee must be in (0, 1), got {params['quiet_guarantee']!r}"
        )
    pages = pool_pages(params)
    pool = tr.kv_pool_bytes(ctx, params["engine"], pages)
    engine = tr.experiment_engine(ctx, params, kv_pool_bytes=pool)
    saturation = tr.measure_saturation(
        engine, noisy_mix(params, ctx.seed), params["saturation_requests"]
    )
    quotas = (Tenant(QUIET, guaranteed_pages=int(params["quiet_guarantee"] * pages)),)
    timeout_s = params["duration_s"] + params["drain_s"]
    for trial in range(ctx.trials):
        both = tr.workload_requests(
            trial_mix(params, saturation, ctx.seed * 1000 + trial + 1), engine.model_cfg.vocab_size
        )
        runs = {
            "alone": ([r for r in both if r.tenant == QUIET], ()),
            "shared": (both, ()),
            "quota": (both, quotas),
        }
        p99 = {}
        for mode in tr.rotated(list(runs), trial):
            requests, tenants = runs[mode]
            engine = tr.reset_with(engine, tenants=tenants)
            served = tr.serve(engine, requests, timeout_s)
            quiet = served.requests["tenant"] == QUIET
            p99[mode] = tr.percentile(tr.observed_ttft_s(served.requests)[quiet], 99)
            ctx.save_frames(requests=served.requests, steps=served.steps, mode=mode, trial=trial)
        labels = {"p99_alone_s": p99["alone"], "saturation_tok_s": saturation.output_tokens_per_s}
        ctx.record(
            "quota_p99_ratio",
            tr.ratio(p99["quota"], p99["alone"]),
            trial=trial,
            unit="x",
            p99_quota_s=p99["quota"],
            **labels,
        )
        ctx.record(
            "shared_p99_ratio",
            tr.ratio(p99["shared"], p99["alone"]),
            trial=trial,
            unit="x",
            p99_shared_s=p99["shared"],
            **labels,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs: quiet alone, shared pool, quotas."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tenant by pool policy")
