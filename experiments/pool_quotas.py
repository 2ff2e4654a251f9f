"""pool-quotas: do per-tenant KV quotas protect a quiet tenant from a noisy one?

A quiet tenant sends short requests, a noisy one long requests, into a KV pool that holds
``pool_requests`` of the noisy kind at once, so pages (not the sequence limit) bind. Each
trial's timeline is built from the saturation on the noisy mix in that pool read by the
trials before it (lab/load/service_rate.py: closed bursts that keep the batch full, their
median; each tenant's work exact); the episode's realised load, against the two bursts
bracketing the trial's arms, is recorded, and a
trial more than ``load_tolerance`` off noisy_load + quiet_load is reported, not scored), in
its service units: the noisy tenant bursts at ``noisy_load`` x saturation for as long as the
engine needs to serve ``episode_requests`` noisy requests at saturation and then stops; the
quiet tenant offers ``quiet_load`` x saturation (in output tokens) through the episode and a
recovery of ``recovery_requests``' worth after it. The same requests are served three times
under FCFS, in an order that rotates from trial to trial, each to completion: the quiet
tenant's alone, both in a fully shared pool, and both with quotas (the quiet tenant
guaranteed ``quiet_guarantee`` of the pool; the rest is the shared burst region, which the
noisy tenant may fill). Shared and quota differ only in the quota.

Metrics: quota_p99_ratio and shared_p99_ratio, the quiet tenant's p99 TTFT beside the noisy
tenant (with quotas, shared) over its p99 TTFT alone.

Why each condition can come out either way: the noisy burst is bounded and pre-registered in
service units, so in the shared pool the quiet tenant's wait is set by the backlog that one
episode leaves (then drained), not by how long the run is left going, and it is the same on
a faster engine; whether its p99 triples depends on how many quiet requests meet that
backlog and how long the queue ahead of them is. Under quotas the quiet tenant still shares
the token budget and each step's time with the noisy prefills and decodes, so whether it
stays within 1.5x depends on that interference, not on the page accounting alone.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), each one mechanism switched:
``quotas-off`` (the quota arm gets no quota: a fully shared pool) and ``quotas-everywhere``
(the shared arm gets the quota arm's quota).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.engine.config_tenants import Tenant
from claimbench.lab.engines import counterfactuals
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec
from claimbench.workload.tenants import TenantLoad

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext
    from claimbench.workload.build import WorkloadRequest

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "pool_requests": 4,
    "quiet_guarantee": 0.25,
    "noisy_load": 1.5,
    "quiet_load": 0.1,
    "load_tolerance": 0.25,  # the episode's realised load within 25%, or not scored
    "quiet_prompt_len": [16, 32],
    "quiet_output_len": [8, 16],
    "noisy_prompt_len": [64, 128],
    "noisy_output_len": [48, 96],
    "episode_requests": 48,
    "recovery_requests": 24,
    "saturation_requests": 24,
    "counterfactual": counterfactuals.NONE,
}
QUIET, NOISY = "quiet", "noisy"
QUIET_SEED = 7919  # the quiet tenant's seed offset from the trial's
MODES = ("alone", "shared", "quota")
# Each counterfactual -> the arms (of shared and quota) that are served with the quota.
COUNTERFACTUALS = {"quotas-off": (), "quotas-everywhere": ("shared", "quota")}


def tenant_load(
    name: str, rate: float, params: dict[str, Any], duration_s: float | None = None
) -> TenantLoad:
    load = tr.poisson_tenant(name, rate, params[f"{name}_prompt_len"], params[f"{name}_output_len"])
    return dataclasses.replace(load, duration_s=duration_s)


def noisy_mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    tenants = (tenant_load(NOISY, 1.0, params),)
    return WorkloadSpec(tenants, seed=seed, max_requests=params["saturation_requests"])


def quiet_mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """The quiet tenant's mix (its own seed: its arrivals are not the noisy tenant's)."""
    tenants = (tenant_load(QUIET, 1.0, params),)
    return WorkloadSpec(tenants, seed=seed + QUIET_SEED, max_requests=params["saturation_requests"])


def trial_requests(
    params: dict[str, Any], saturation: tr.Saturation, seed: int, vocab_size: int
) -> list[WorkloadRequest]:
    """Both tenants at their loads, in arrival order: the noisy one offering noisy_load x
    saturation output tokens/s for the episode, the quiet one quiet_load x saturation for
    the episode and recovery (each phase's work exact: tenant_runs.phased_requests)."""
    for name in (QUIET, NOISY):
        if not params[f"{name}_load"] > 0:
            raise ValueError(f"param {name}_load must be > 0, got {params[f'{name}_load']!r}")
    episode, recovery = params["episode_requests"], params["recovery_requests"]
    noisy = tr.phased_requests(
        noisy_mix(params, seed), saturation, [tr.Phase(episode, params["noisy_load"])], vocab_size
    )
    quiet = tr.phased_requests(
        quiet_mix(params, seed),
        saturation,
        [tr.Phase(episode + recovery, params["quiet_load"])],
        vocab_size,
    )
    both = sorted(noisy + quiet, key=lambda r: (r.arrival_s, r.tenant))
    return [dataclasses.replace(r, request_index=i) for i, r in enumerate(both)]


def pool_pages(params: dict[str, Any]) -> int:
    page_size = params["engine"].get("page_size", DEFAULT_PAGE_SIZE)
    longest = params["noisy_prompt_len"][1] + params["noisy_output_len"][1]
    return params["pool_requests"] * -(-longest // page_size)


def run(ctx: RunContext) -> None:
    """Record quota_p99_ratio and shared_p99_ratio per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    with_quota = COUNTERFACTUALS.get(
        counterfactuals.chosen(params, tuple(COUNTERFACTUALS)), ("quota",)
    )
    if not 0 < params["quiet_guarantee"] < 1:
        raise ValueError(
            f"param quiet_guarantee must be in (0, 1), got {params['quiet_guarantee']!r}"
        )
    pages = pool_pages(params)
    pool = tr.kv_pool_bytes(ctx, params["engine"], pages)
    engine = ctx.engine(precompile=True, compile_cache=params["compile_cache"], kv_pool_bytes=pool)
    baseline = engine.config
    quotas = (Tenant(QUIET, guaranteed_pages=int(params["quiet_guarantee"] * pages)),)
    meter = service_rate.SaturationMeter(engine, params["saturation_requests"], config=baseline)
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        saturation = meter.pace(noisy_mix(params, seed))
        both = trial_requests(params, saturation, seed, engine.model_cfg.vocab_size)
        arms = {
            "alone": tr.Arm([r for r in both if r.tenant == QUIET], {"tenants": ()}),
            "shared": tr.Arm(both, {"tenants": quotas if "shared" in with_quota else ()}),
            "quota": tr.Arm(both, {"tenants": quotas if "quota" in with_quota else ()}),
        }
        # The episode, recovery and the noisy backlog's drain, with a safety margin.
        expected_s = saturation.seconds_for(
            params["episode_requests"] * (1 + params["noisy_load"]) + params["recovery_requests"]
        )
        served = tr.serve_arms(
            ctx, engine, baseline, arms, trial, timeout_s=tr.safety_timeout_s(expected_s)
        )
        service = meter.measure(noisy_mix(params, seed))
        # The episode's realised load: both tenants, noisy_load + quiet_load nominal.
        open_loop.record_episode_load(
            ctx,
            trial,
            both,
            saturation,
            service,
            params,
            target=params["noisy_load"] + params["quiet_load"],
        )
        p99 = {}
        for mode, arm_run in served.items():
            quiet = arm_run.requests["tenant"] == QUIET
            p99[mode] = tr.percentile(tr.observed_ttft_s(arm_run.requests)[quiet], 99)
        labels = {
            "p99_alone_s": p99["alone"],
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "num_quiet": len(arms["alone"].requests),
            "num_noisy": len(both) - len(arms["alone"].requests),
            "timed_out": any(r.timed_out for r in served.values()),
        }
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
