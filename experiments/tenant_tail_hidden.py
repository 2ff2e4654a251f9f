"""tenant-tail-hidden: under FCFS at 90% load, does the pooled p99 TTFT hide a small tenant's?

The tenants differ the way a shared deployment's tenants do. The big tenant (``big_share``
of the requests) is a consumer product: the superposition of many independent users,
which is close to poisson, with short interactive prompts. Each of the
``num_small_tenants`` small tenants (sharing the rest evenly) is one customer's
application, whose requests come in clumps (an agent's fan-out, a batch job, a page
load): gamma arrivals with ``small_burstiness`` < 1 (the coefficient of variation of
the gaps is 1 / sqrt(burstiness)). Lengths are params per class, equal by default, so
the one difference is the arrival process.

Under FCFS a request waits for everything that arrived before it, so a tenant's TTFT
depends on what its arrivals meet. Poisson arrivals see the queue's time average; a
clump's later requests wait behind the clump itself. The pooled p99 is mostly the big
tenant's; the question is whether a small tenant's p99 sits far enough above it that
the pooled number hides it (each small tenant has few requests, so its p99 is near its
worst; the burstiness is what can put that worst far out).

Each trial measures the engine's saturation on this mix, then offers ``load`` x that for
as long as the engine needs to serve ``episode_requests`` requests at saturation (a fresh
seed per trial), serves it to completion under FCFS, and compares the worst small
tenant's p99 TTFT with the p99 over every request pooled.
The service rate is the saturation measured in every trial (lab/load/service_rate.py: a closed
burst that keeps the batch full, whatever the trial's load); a trial's arrivals are built
from the readings of the trials before it (their median; the episode's work exact), and
its realised load, taken against the two bursts bracketing its own arms, is recorded: a
trial more than ``load_tolerance`` off ``load`` is reported, not scored.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``tenants-identical``, the
small tenants arrive poisson like the big one (burstiness 1), so with equal lengths every
tenant is the same process at a different rate.

Params (claims.yaml, per profile): engine, compile_cache, load, big_share,
num_small_tenants, big_prompt_len, big_output_len, small_prompt_len, small_output_len
([lo, hi] uniform), small_burstiness, episode_requests, saturation_requests, counterfactual.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.lab.engines import counterfactuals
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec
from claimbench.workload.tenants import TenantLoad

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "load": 0.9,
    "load_tolerance": 0.25,  # realised load within 25% of load, or not scored
    "big_share": 0.7,
    "num_small_tenants": 6,
    "big_prompt_len": [16, 48],
    "big_output_len": [16, 48],
    "small_prompt_len": [16, 48],
    "small_output_len": [16, 48],
    "small_burstiness": 0.25,
    "episode_requests": 512,
    "saturation_requests": 64,
    "counterfactual": counterfactuals.NONE,
}
BIG = "big"
COUNTERFACTUALS = ("tenants-identical",)


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """The tenant mix at relative rates (1 request/s in all); bounded by the saturation
    burst's count (the episode takes its own span)."""
    if not 0 < params["big_share"] < 1:
        raise ValueError(f"param big_share must be in (0, 1), got {params['big_share']!r}")
    num_small = params["num_small_tenants"]
    if not isinstance(num_small, int) or num_small < 1:
        raise ValueError(f"param num_small_tenants must be an integer >= 1, got {num_small!r}")
    small_rate = (1.0 - params["big_share"]) / num_small
    identical = counterfactuals.chosen(params, COUNTERFACTUALS) == "tenants-identical"
    big = tr.poisson_tenant(
        BIG, params["big_share"], params["big_prompt_len"], params["big_output_len"]
    )
    small = [
        TenantLoad(
            f"small{i}",
            arrival="poisson" if identical else "gamma",
            rate=small_rate,
            burstiness=1.0 if identical else params["small_burstiness"],
            prompt_len=tr.uniform(params["small_prompt_len"]),
            output_len=tr.uniform(params["small_output_len"]),
        )
        for i in range(num_small)
    ]
    return WorkloadSpec((big, *small), seed=seed, max_requests=params["saturation_requests"])


def hidden_tail(requests: pd.DataFrame) -> dict[str, float]:
    """Worst small tenant's p99 TTFT against the p99 of every request pooled."""
    ttft = tr.observed_ttft_s(requests)
    pooled = tr.percentile(ttft, 99)
    per_tenant = tr.tenant_percentiles(requests, ttft, 99)
    small = {t: v for t, v in per_tenant.items() if t != BIG}
    if not small:
        raise ValueError("no small tenant completed a request")
    worst = max(small.values())
    return {
        "worst_tenant_p99_ttft_over_pooled": tr.ratio(worst, pooled),
        "worst_small_p99_ttft_s": worst,
        "pooled_p99_ttft_s": pooled,
        "big_p99_ttft_s": per_tenant.get(BIG, float("nan")),
    }


def run(ctx: RunContext) -> None:
    """Record worst_tenant_p99_ttft_over_pooled per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    engine = ctx.engine(
        precompile=True, compile_cache=params["compile_cache"], scheduling_policy="fcfs"
    )
    baseline = engine.config
    vocab_size = engine.model_cfg.vocab_size
    meter = service_rate.SaturationMeter(engine, params["saturation_requests"], config=baseline)
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        saturation = meter.pace(mix(params, seed))
        phase = tr.Phase(params["episode_requests"], params["load"])
        requests = tr.phased_requests(mix(params, seed), saturation, [phase], vocab_size)
        # Below saturation the episode drains as it arrives; the margin is for safety only.
        timeout_s = tr.safety_timeout_s(saturation.seconds_for(params["episode_requests"]))
        served = tr.serve_arms(
            ctx, engine, baseline, {"fcfs": tr.Arm(requests)}, trial, timeout_s=timeout_s
        )["fcfs"]
        service = meter.measure(mix(params, seed))
        open_loop.record_episode_load(ctx, trial, requests, saturation, service, params)
        result = hidden_tail(served.requests)
        labels = {
            "load": params["load"],
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "num_requests": len(requests),
            "timed_out": served.timed_out,
        }
        ctx.record(
            "worst_tenant_p99_ttft_over_pooled",
            result["worst_tenant_p99_ttft_over_pooled"],
            trial=trial,
            unit="x",
            **labels,
        )
        for name in ("worst_small_p99_ttft_s", "pooled_p99_ttft_s", "big_p99_ttft_s"):
            ctx.record(name, result[name], trial=trial, unit="s", **labels)


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs of the latest run."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tenant under FCFS")
