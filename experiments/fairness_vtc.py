"""fairness-vtc: does the virtual token counter keep backlogged tenants' service within its bound?

Two tenants with the same length mix overload the engine together in one bounded episode:
arrivals at ``load`` x the trial's saturation for as long as the engine needs to serve
``episode_requests`` requests of the mix at saturation, the heavy tenant sending
``heavy_share`` of them; then arrivals stop and the backlog is served to completion. Each
trial measures its own saturation first, then serves the same requests twice, under FCFS
and under VTC (the only difference), in an order that rotates from trial to trial.
The service rate is the saturation measured in every trial (lab/load/service_rate.py: a closed
burst that keeps the batch full, whatever the trial's load); a trial's arrivals are built
from the readings of the trials before it (their median; the episode's work exact), and
its realised load, taken against the two bursts bracketing its own arms, is recorded: a
trial more than ``load_tolerance`` off ``load`` is reported, not scored.

Service is w_in * input + w_out * output tokens (``input_weight``, ``output_weight``). The gap
is the largest difference in service two tenants received over an interval in which both
had waiting requests (lab/metrics/service.py). The bound is Sheng et al.'s 2 * max(w_in * L_in,
w_out * M), from each run's own measurements: L_in its longest prompt, M the most tokens of
context its running batch held after any step. Throughput is output tokens per second over
the steps that ran while a request was waiting (the overload, where both arms run a full
batch; tenant_runs.backlogged_throughput, the engine's clock, so HTTP latency to the client
does not move the window); the cost is VTC's shortfall against FCFS in percent.

Why each condition can come out either way: the episode is fixed in service units and
pre-registered, so FCFS's gap is what arrival-order service accumulates over that episode,
not whatever a longer run would reach; at this episode length and share whether it passes
3x the bound depends on how the batch (M) compares with the backlog's service, and on a
faster engine the episode (and so the gap) is the same. VTC's gap is bounded only if the
scheduler really equalises counters under chunked prefill and batching; its throughput
cost is measured in the same saturated window as FCFS's.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), each one mechanism off:
``vtc-off`` (the VTC arm is served FCFS: its gap is arrival order's), ``fcfs-fair`` (the
FCFS arm is served by VTC: its gap is the counter's) and ``vtc-idle`` (the VTC arm is not
work-conserving: while a request waits it schedules at most half of max_num_seqs tokens a
step, a degradation-ladder rung, so it leaves batch slots idle that FCFS fills).

Params (claims.yaml, per profile): engine, compile_cache, load, heavy_share, prompt_len and
output_len ([lo, hi] uniform), episode_requests, saturation_requests, input_weight,
output_weight, counterfactual.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claimbench.engine.config_ladder import Rung
from claimbench.engine.sched.fairness import RUNNING_TOKENS
from claimbench.lab.engines import counterfactuals
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.metrics.service import cumulative_service, max_service_gap, steps_backlog
from claimbench.workload.build import WorkloadRequest
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "load": 2.0,
    "load_tolerance": 0.25,  # realised load within 25% of load, or not scored
    "heavy_share": 0.65,
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "episode_requests": 256,
    "saturation_requests": 32,
    "input_weight": 1.0,
    "output_weight": 2.0,
    # engine: replayed in process; http: through the OpenAI-compatible server, one API key
    # per tenant (saturation too: the load is in units of what the server can serve).
    "via": "engine",
    "counterfactual": counterfactuals.NONE,
}
MODES = ("fcfs", "vtc")
# Each counterfactual's arm -> the policy that arm is served by instead of its own.
COUNTERFACTUALS = {"vtc-off": {"vtc": "fcfs"}, "fcfs-fair": {"fcfs": "vtc"}}
VTC_IDLE = (*COUNTERFACTUALS, "vtc-idle")


def idle_half(max_num_seqs: int) -> tuple[Rung, ...]:
    """vtc-idle's ladder: while any request waits, at most half the batch's tokens a step."""
    rung = Rung(
        "lower_token_budget", "waiting_requests", 1, 0, token_budget=max(1, max_num_seqs // 2)
    )
    return (rung,)


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """The two tenants at relative rates heavy_share : 1 - heavy_share (scaled later)."""
    lengths = (params["prompt_len"], params["output_len"])
    share = params["heavy_share"]
    if not 0 < share < 1:
        raise ValueError(f"param heavy_share must be in (0, 1), got {share!r}")
    tenants = (
        tr.poisson_tenant("heavy", share, *lengths),
        tr.poisson_tenant("light", 1.0 - share, *lengths),
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=params["saturation_requests"])


def episode(
    params: dict[str, Any], saturation: tr.Saturation, seed: int, vocab_size: int
) -> list[WorkloadRequest]:
    """The overload episode: ``load`` x saturation for episode_requests' service time."""
    phase = tr.Phase(params["episode_requests"], params["load"])
    return tr.phased_requests(mix(params, seed), saturation, [phase], vocab_size)


def service_gap(served: tr.ServedRun, params: dict[str, Any]) -> dict[str, float]:
    """The run's gap, its bound and their ratio."""
    w_in, w_out = params["input_weight"], params["output_weight"]
    service = cumulative_service(served.steps, input_weight=w_in, output_weight=w_out)
    gap = max_service_gap(service, steps_backlog(served.steps))
    longest_prompt = float(served.requests["prompt_tokens"].max())
    most_running = float(served.steps[RUNNING_TOKENS].max())
    bound = 2.0 * max(w_in * longest_prompt, w_out * most_running)
    return {"gap": gap, "bound": bound, "gap_over_bound": tr.ratio(gap, bound)}


def run(ctx: RunContext) -> None:
    """Record vtc_gap_over_bound, fcfs_gap_over_bound and throughput_cost_pct per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    chosen = counterfactuals.chosen(params, VTC_IDLE)
    swapped = COUNTERFACTUALS.get(chosen, {})
    engine = ctx.engine(
        precompile=True,
        compile_cache=params["compile_cache"],
        vtc_input_weight=params["input_weight"],
        vtc_output_weight=params["output_weight"],
    )
    baseline = engine.config
    idle = (
        {"vtc": {"ladder": idle_half(baseline.scheduler.max_num_seqs)}}
        if chosen == "vtc-idle"
        else {}
    )
    vocab_size = engine.model_cfg.vocab_size
    meter = service_rate.SaturationMeter(
        engine, params["saturation_requests"], config=baseline, via=params["via"]
    )
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        saturation = meter.pace(mix(params, seed))
        requests = episode(params, saturation, seed, vocab_size)
        # The episode, then its drain at full speed: twice its length, with a safety margin.
        timeout_s = tr.safety_timeout_s(2 * saturation.seconds_for(params["episode_requests"]))
        arms = {
            mode: tr.Arm(
                requests, {"scheduling_policy": swapped.get(mode, mode)} | idle.get(mode, {})
            )
            for mode in MODES
        }
        served = tr.serve_arms(
            ctx, engine, baseline, arms, trial, timeout_s=timeout_s, via=params["via"]
        )
        service = meter.measure(mix(params, seed))
        open_loop.record_episode_load(ctx, trial, requests, saturation, service, params)
        results = {
            mode: service_gap(r, params) | {"throughput": tr.backlogged_throughput(r.steps)}
            for mode, r in served.items()
        }
        labels = {
            "load": params["load"],
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "num_requests": len(requests),
            "timed_out": any(r.timed_out for r in served.values()),
        }
        for mode in MODES:
            r = results[mode]
            ctx.record(
                f"{mode}_gap_over_bound",
                r["gap_over_bound"],
                trial=trial,
                unit="x",
                gap=r["gap"],
                bound=r["bound"],
                **labels,
            )
        fcfs_tp, vtc_tp = results["fcfs"]["throughput"], results["vtc"]["throughput"]
        cost = 100.0 * tr.ratio(fcfs_tp - vtc_tp, fcfs_tp)
        ctx.record(
            "throughput_cost_pct",
            cost,
            trial=trial,
            unit="%",
            fcfs_tok_s=fcfs_tp,
            vtc_tok_s=vtc_tp,
            **labels,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Cumulative service per tenant over time, FCFS beside VTC (newest run, first trial)."""
    found = tenant_charts.newest_frame(run_dirs, "steps", ("start_s", "mode"))
    if found is None or not any(c.startswith("input_tokens.") for c in found[1].columns):
        return []
    run_dir, steps = found
    meta = run_dir / "meta.json"
    stored = json.loads(meta.read_text())["params"] if meta.is_file() else {}
    params = DEFAULT_PARAMS | {k: v for k, v in stored.items() if k in DEFAULT_PARAMS}
    svg = tenant_charts.service_svg(
        steps, input_weight=params["input_weight"], output_weight=params["output_weight"]
    )
    return [("Cumulative service per tenant: FCFS and VTC", svg)]
