"""admission-at-ingress: does bounded per-tenant admission keep admitted requests' TTFT in check?

``num_tenants`` equal tenants share one length mix with poisson arrivals. Each trial serves
three runs, in an order that rotates from trial to trial: ``base_load`` (50%) of the
saturation output throughput measured first, with no
limits; ``overload`` (2x) with per-tenant ingress limits; and the same overload with no
limits. The limit caps each tenant's waiting requests so that all tenants together queue at
most ``queue_batches`` x max_num_seqs requests (at least one each); a request over it is
rejected at add time. Runs stop ``drain_s`` after the last arrival; a request still waiting
then counts the time it had waited (a lower bound on its TTFT). Rejected requests are not
admitted and are left out.

Metrics: admitted_p99_ttft_ratio (p99 TTFT of admitted requests under overload with limits /
at base load) and unbounded_p99_ttft_ratio (the same without limits / at base load).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from claimbench.engine.tenants import Tenant
from claimbench.harness import tenant_runs as tr
from claimbench.site import tenant_charts
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "num_tenants": 4,
    "base_load": 0.5,
    "overload": 2.0,
    "queue_batches": 1.0,
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "duration_s": 12.0,
    "drain_s": 4.0,
    "saturation_requests": 32,
}


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    lengths = (params["prompt_len"], params["output_len"])
    n = params["num_tenants"]
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"param num_tenants must be an integer >= 1, got {n!r}")
    tenants = tuple(tr.poisson_tenant(f"t{i}", 1.0 / n, *lengths) for i in range(n))
    return WorkloadSpec(tenants, seed=seed, max_duration_s=params["duration_s"])


def ingress_limits(params: dict[str, Any], max_num_seqs: int) -> tuple[Tenant, ...]:
    """Each tenant's share of a queue of queue_batches x max_num_seqs requests."""
    n = params["num_tenants"]
    per_tenant = max(1, round(params["queue_batches"] * max_num_seqs / n))
    return tuple(Tenant(f"t{i}", max_queued_requests=per_tenant) for i in range(n))


def run(ctx: RunContext) -> None:
    """Record admitted_p99_ttft_ratio and unbounded_p99_ttft_ratio per trial."""
    params = DEFAULT_PARAMS | ctx.params
    engine = tr.experiment_engine(ctx, params)
    saturation = tr.measure_saturation(engine, mix(params, ctx.seed), params["saturation_requests"])
    limits = ingress_limits(params, engine.config.max_num_seqs)
    timeout_s = params["duration_s"] + params["drain_s"]
    runs = {
        "base": (params["base_load"], ()),
        "bounded": (params["overload"], limits),
        "unbounded": (params["overload"], ()),
    }
    for trial in range(ctx.trials):
        seed = ctx.seed * 1000 + trial + 1
        p99, rejected = {}, {}
        for mode in tr.rotated(list(runs), trial):
            load, tenants = runs[mode]
            spec = tr.at_load(mix(params, seed), saturation, load)
            engine = tr.reset_with(engine, tenants=tenants)
            served = tr.serve(
                engine, tr.workload_requests(spec, engine.model_cfg.vocab_size), timeout_s
            )
            p99[mode] = tr.percentile(tr.observed_ttft_s(served.requests), 99)
            rejected[mode] = int((served.requests["finish_reason"] == "rejected").sum())
            ctx.save_frames(requests=served.requests, steps=served.steps, mode=mode, trial=trial)
        labels = {"p99_base_s": p99["base"], "saturation_tok_s": saturation.output_tokens_per_s}
        ctx.record(
            "admitted_p99_ttft_ratio",
            tr.ratio(p99["bounded"], p99["base"]),
            trial=trial,
            unit="x",
            p99_bounded_s=p99["bounded"],
            rejected=rejected["bounded"],
            queue_limit=limits[0].max_queued_requests,
            **labels,
        )
        ctx.record(
            "unbounded_p99_ttft_ratio",
            tr.ratio(p99["unbounded"], p99["base"]),
            trial=trial,
            unit="x",
            p99_unbounded_s=p99["unbounded"],
            **labels,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs at base load, overload with limits, overload without."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tenant by admission policy")
