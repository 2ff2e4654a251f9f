"""priority-aging: does aging keep the low tier from starving without hurting the high tier?

Every trial sets every load and window in units of the engine's saturation on the trial's
request mix (lab/load/service_rate.py: a closed burst that keeps the batch full; ``mu``
requests/s) read by the trials before it, so the experiment is the same on a slow and a
fast engine. One "request time" is 1 / mu.

The workload is an overload episode: for ``window_requests`` request times a high-tier
tenant (tier 0) offers ``high_load`` x the service rate (above 1: alone it keeps a queue
for the whole episode, the regime in which strict priority starves) and a low-tier tenant
(tier 1) offers ``low_load`` on top, both poisson with the same length mix. The realised
load of both tiers over the measured rate is recorded per trial; a trial more than
``load_tolerance`` off high_load + low_load is reported, not scored. So is the manipulation
check, strict_high_backlogged_pct: the % of the strict arm's steps during the arrivals that
ran with a high-tier request waiting, i.e. how much of the episode strict priority had a
reason to starve the low tier. Arrivals then stop and
the backlog is served to completion. Each trial serves the same arrivals three times, in
an order that rotates across trials: the high tier alone, both tiers under strict
``priority``, both under ``priority-aging`` (every arm with the same aging horizon, so
the arms differ only in the ordering). Wait is arrival to first scheduled.

Aging's horizon is ``aging_requests`` request times (aging_s). The ordering sorts by the
virtual deadline arrival + tier * aging_s, so a low-tier request is overtaken only by
high-tier requests that arrive less than gap * aging_s after it (gap = the tier
difference): it waits at most that horizon longer than a high-tier request arriving then.
The bound it can be promised is therefore the horizon on top of the high tier's own worst
wait, taken as served alone: bound = gap * aging_s + the high tier's worst wait alone.
(gap * aging_s by itself cannot bound anything here: with the high tier at the service
rate, any request, high-tier ones included, also waits for the work queued ahead of it.)
The bound fails when the low tier's work, let in by aging, delays the high tier beyond
what it sees alone; strict priority starves the low tier for as long as the high tier
keeps a queue, up to the whole episode (window_requests / aging_requests horizons).

Metrics: low_wait_over_bound (low tier's worst wait under aging / bound), high_p99_ratio
(high tier's p99 TTFT under aging / alone), strict_low_wait_ratio (low tier's worst wait
under strict priority / under aging).

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), each one mechanism off:
``aging-off`` (the aging arm is served by strict priority) and ``tiers-off`` (the aging arm is
served FCFS: no tier ordering at all, so the high tier waits behind the low tier's work).

Param ``device_step_s`` (0: the real device): every step of the trial, the service-rate
meter's included, takes that long on a device of a fixed step time (lab/engines/slow_device.py).
With it well above the host's own work, which request waits how long follows from step
counts, not from a shared host's jitter: the counterfactual tests use it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.engine.sched.fairness import BACKLOG_PREFIX
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.slow_device import device_param
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.workload.build import WorkloadRequest

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "high_load": 1.1,
    "low_load": 0.1,
    "load_tolerance": 0.15,
    "aging_requests": 32,
    "window_requests": 256,
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "saturation_requests": 64,
    "device_step_s": 0.0,  # 0: the real device; else every step takes this long (seconds)
    "counterfactual": counterfactuals.NONE,
}
HIGH, LOW = "high", "low"
TIERS = {HIGH: 0, LOW: 1}
POLICIES = {"high-alone": "fcfs", "strict": "priority", "aging": "priority-aging"}
# Each counterfactual's arm -> the policy that arm is served by instead of its own.
COUNTERFACTUALS = {"aging-off": {"aging": "priority"}, "tiers-off": {"aging": "fcfs"}}


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """High and low tier at rates proportional to their loads (same length mix); bounded
    by the saturation burst's count (episodes take their own span)."""
    for name in ("high_load", "low_load"):
        if not params[name] > 0:
            raise ValueError(f"param {name} must be > 0, got {params[name]!r}")
    lengths = (params["prompt_len"], params["output_len"])
    tenants = (
        tr.poisson_tenant(HIGH, params["high_load"], *lengths, priority=TIERS[HIGH]),
        tr.poisson_tenant(LOW, params["low_load"], *lengths, priority=TIERS[LOW]),
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=params["saturation_requests"])


def episode(
    params: dict[str, Any], saturation: tr.Saturation, seed: int, vocab_size: int
) -> list[WorkloadRequest]:
    """Both tiers together at high_load + low_load for window_requests' service time."""
    total = params["high_load"] + params["low_load"]
    phase = tr.Phase(params["window_requests"], total)
    return tr.phased_requests(mix(params, seed), saturation, [phase], vocab_size)


def tier_outcome(requests: pd.DataFrame) -> dict[str, float]:
    """Worst wait of each tier and the high tier's p99 TTFT, from one run's requests frame
    (a tier absent from the run gets NaN)."""
    wait = tr.observed_wait_s(requests)
    ttft = tr.observed_ttft_s(requests)
    out = {}
    for tenant in (HIGH, LOW):
        rows = requests["tenant"] == tenant
        out[f"{tenant}_worst_wait_s"] = float(wait[rows].max()) if rows.any() else float("nan")
    out["high_p99_ttft_s"] = tr.percentile(ttft[requests["tenant"] == HIGH], 99)
    return out


def aging_metrics(outcomes: dict[str, dict[str, float]], aging_s: float) -> dict[str, float]:
    """The claim's three ratios (and the bound) from each mode's ``tier_outcome``."""
    alone, aging, strict = outcomes["high-alone"], outcomes["aging"], outcomes["strict"]
    bound_s = (TIERS[LOW] - TIERS[HIGH]) * aging_s + alone["high_worst_wait_s"]
    return {
        "low_wait_over_bound": tr.ratio(aging["low_worst_wait_s"], bound_s),
        "high_p99_ratio": tr.ratio(aging["high_p99_ttft_s"], alone["high_p99_ttft_s"]),
        "strict_low_wait_ratio": tr.ratio(strict["low_worst_wait_s"], aging["low_worst_wait_s"]),
        "bound_s": bound_s,
    }


def high_backlogged_pct(served: tr.ServedRun, window_s: float) -> float:
    """% of the run's steps starting within [0, window_s) (the arrivals) that had a
    high-tier request waiting."""
    steps = served.steps
    during = steps[steps["start_s"] < window_s]
    column = f"{BACKLOG_PREFIX}{HIGH}"
    if during.empty or column not in during:
        return 0.0
    return 100.0 * float(during[column].astype(bool).mean())


def run(ctx: RunContext) -> None:
    """Record low_wait_over_bound, high_p99_ratio and strict_low_wait_ratio per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    policies = POLICIES | COUNTERFACTUALS.get(
        counterfactuals.chosen(params, tuple(COUNTERFACTUALS)), {}
    )
    for name in ("aging_requests", "window_requests"):
        if not params[name] > 0:
            raise ValueError(f"param {name} must be > 0, got {params[name]!r}")
    engine = ctx.engine(precompile=True, compile_cache=params["compile_cache"])
    with device_param(engine, params["device_step_s"]):
        _trials(ctx, engine, params, policies)


def _trials(
    ctx: RunContext, engine: LLMEngine, params: dict[str, Any], policies: dict[str, str]
) -> None:
    """Every trial of the run on ``engine`` (see run), each arm served by its policy."""
    vocab_size = engine.model_cfg.vocab_size
    meter = service_rate.SaturationMeter(
        engine, params["saturation_requests"], config=engine.config
    )
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        saturation = meter.pace(mix(params, seed))
        aging_s = saturation.seconds_for(params["aging_requests"])
        # Every arm carries the same horizon; only the ordering (and, alone, the requests) differ.
        baseline = dataclasses.replace(engine.config, priority_aging_s=aging_s)
        both = episode(params, saturation, seed, vocab_size)
        arms = {
            mode: tr.Arm(
                [r for r in both if r.tenant == HIGH] if mode == "high-alone" else both,
                {"scheduling_policy": policy},
            )
            for mode, policy in policies.items()
        }
        # Served to completion: the episode plus its backlog, with a safety margin.
        total = params["high_load"] + params["low_load"]
        timeout_s = tr.safety_timeout_s(saturation.seconds_for(params["window_requests"] * total))
        served = tr.serve_arms(ctx, engine, baseline, arms, trial, timeout_s=timeout_s)
        service = meter.measure(mix(params, seed))
        outcomes = {mode: tier_outcome(r.requests) for mode, r in served.items()}
        metrics = aging_metrics(outcomes, aging_s)
        window_s = saturation.seconds_for(params["window_requests"])
        open_loop.record_load(
            ctx, trial, both, window_s, service, target=total, tolerance=params["load_tolerance"]
        )
        ctx.record(
            "strict_high_backlogged_pct",
            high_backlogged_pct(served["strict"], window_s),
            trial=trial,
            unit="%",
        )
        labels = {
            "aging_s": aging_s,
            "bound_s": metrics["bound_s"],
            "window_s": window_s,
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "timed_out": any(r.timed_out for r in served.values()),
        }
        ctx.record(
            "low_wait_over_bound",
            metrics["low_wait_over_bound"],
            trial=trial,
            unit="x",
            low_worst_wait_s=outcomes["aging"]["low_worst_wait_s"],
            high_worst_wait_alone_s=outcomes["high-alone"]["high_worst_wait_s"],
            **labels,
        )
        ctx.record(
            "high_p99_ratio",
            metrics["high_p99_ratio"],
            trial=trial,
            unit="x",
            high_p99_aging_s=outcomes["aging"]["high_p99_ttft_s"],
            high_p99_alone_s=outcomes["high-alone"]["high_p99_ttft_s"],
            **labels,
        )
        ctx.record(
            "strict_low_wait_ratio",
            metrics["strict_low_wait_ratio"],
            trial=trial,
            unit="x",
            low_worst_wait_strict_s=outcomes["strict"]["low_worst_wait_s"],
            **labels,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs: the high tier alone, then both tiers strict and aged."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tier")
