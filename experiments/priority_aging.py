"""priority-aging: does aging keep the low tier from starving without hurting the high tier?

A high-tier tenant (tier 0) offers ``high_load`` and a low-tier tenant (tier 1) ``low_load``,
as fractions of the saturation output throughput measured first; by default the high tier
alone nearly saturates the engine and together they overload it, the regime in which strict
priority starves. Each trial serves the same arrivals three times: the high tier alone,
both under strict ``priority``, both under ``priority-aging``, in an order that rotates from
trial to trial (a drift in the host's speed favours no mode). Runs stop ``drain_s`` after
the last arrival; a request still waiting then counts the wait it had (a lower bound).

Aging's horizon is ``aging_requests`` requests' worth of saturation time (aging_s =
aging_requests / saturation requests/s), so it means the same on any hardware; the bound on
the low tier's wait is the tier gap times aging_s. Wait is arrival to first scheduled.

Metrics: low_wait_over_bound (low tier's worst wait under aging / bound), high_p99_ratio
(high tier's p99 TTFT under aging / alone), strict_low_wait_ratio (low tier's worst wait
under strict priority / under aging).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from claimbench.harness import tenant_runs as tr
from claimbench.site import tenant_charts
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "high_load": 0.8,
    "low_load": 0.3,
    "aging_requests": 16,
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "duration_s": 12.0,
    "drain_s": 6.0,
    "saturation_requests": 32,
}
HIGH, LOW = "high", "low"
TIERS = {HIGH: 0, LOW: 1}


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """High and low tier at rates proportional to their loads (same length mix)."""
    for name in ("high_load", "low_load"):
        if not params[name] > 0:
            raise ValueError(f"param {name} must be > 0, got {params[name]!r}")
    lengths = (params["prompt_len"], params["output_len"])
    tenants = (
        tr.poisson_tenant(HIGH, params["high_load"], *lengths, priority=TIERS[HIGH]),
        tr.poisson_tenant(LOW, params["low_load"], *lengths, priority=TIERS[LOW]),
    )
    return WorkloadSpec(tenants, seed=seed, max_duration_s=params["duration_s"])


def run(ctx: RunContext) -> None:
    """Record low_wait_over_bound, high_p99_ratio and strict_low_wait_ratio per trial."""
    params = DEFAULT_PARAMS | ctx.params
    engine = tr.experiment_engine(ctx, params)
    saturation = tr.measure_saturation(engine, mix(params, ctx.seed), params["saturation_requests"])
    aging_s = params["aging_requests"] / saturation.requests_per_s
    bound_s = (TIERS[LOW] - TIERS[HIGH]) * aging_s
    total_load = params["high_load"] + params["low_load"]
    timeout_s = params["duration_s"] + params["drain_s"]
    for trial in range(ctx.trials):
        spec = tr.at_load(mix(params, ctx.seed * 1000 + trial + 1), saturation, total_load)
        both = tr.workload_requests(spec, engine.model_cfg.vocab_size)
        high_only = [r for r in both if r.tenant == HIGH]
        runs = {
            "high-alone": (high_only, "fcfs"),
            "strict": (both, "priority"),
            "aging": (both, "priority-aging"),
        }
        waits, high_p99 = {}, {}
        for mode in tr.rotated(list(runs), trial):
            requests, policy = runs[mode]
            engine = tr.reset_with(engine, scheduling_policy=policy, priority_aging_s=aging_s)
            served = tr.serve(engine, requests, timeout_s)
            frame = served.requests
            wait = tr.observed_wait_s(frame)
            waits[mode] = float(wait[frame["tenant"] == LOW].max()) if mode != "high-alone" else 0.0
            high = frame["tenant"] == HIGH
            high_p99[mode] = tr.percentile(tr.observed_ttft_s(frame)[high], 99)
            ctx.save_frames(requests=frame, steps=served.steps, mode=mode, trial=trial)
        labels = {"aging_s": aging_s, "saturation_tok_s": saturation.output_tokens_per_s}
        ctx.record(
            "low_wait_over_bound",
            tr.ratio(waits["aging"], bound_s),
            trial=trial,
            unit="x",
            low_worst_wait_s=waits["aging"],
            bound_s=bound_s,
            **labels,
        )
        ctx.record(
            "high_p99_ratio",
            tr.ratio(high_p99["aging"], high_p99["high-alone"]),
            trial=trial,
            unit="x",
            high_p99_aging_s=high_p99["aging"],
            high_p99_alone_s=high_p99["high-alone"],
            **labels,
        )
        ctx.record(
            "strict_low_wait_ratio",
            tr.ratio(waits["strict"], waits["aging"]),
            trial=trial,
            unit="x",
            low_worst_wait_strict_s=waits["strict"],
            **labels,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs: the high tier alone, then both tiers strict and aged."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tier")
