"""fairness-vtc: does the virtual token counter keep backlogged tenants' service within its bound?

Two tenants with the same length mix overload the engine together (``load`` x the saturation
output throughput measured first), the heavy one sending ``heavy_share`` of the requests.
Each trial serves the same ``duration_s`` seconds of poisson arrivals twice, under FCFS and
under VTC, and stops when the arrivals stop (the overload window is what is measured). The
modes' order rotates from trial to trial, so a drift in the host's speed favours neither.

Service is w_in * input + w_out * output tokens (``input_weight``, ``output_weight``). The gap
is the largest difference in service two tenants received over an interval in which both
had waiting requests (engine/fairness.py). The bound is Sheng et al.'s 2 * max(w_in * L_in,
w_out * M), from each run's own measurements: L_in its longest prompt, M the most tokens of
context its running batch held after any step. Throughput is output tokens produced between
the first and last arrival, per second; the cost is VTC's shortfall against FCFS in percent.

Params (claims.yaml, per profile): engine, load, heavy_share, prompt_len and output_len
([lo, hi] uniform), duration_s, saturation_requests, input_weight, output_weight.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.fairness import RUNNING_TOKENS
from claimbench.harness import tenant_runs as tr
from claimbench.harness.service import cumulative_service, max_service_gap, steps_backlog
from claimbench.site import tenant_charts
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "load": 2.0,
    "heavy_share": 0.65,
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "duration_s": 20.0,
    "saturation_requests": 32,
    "input_weight": 1.0,
    "output_weight": 2.0,
}
MODES = ("fcfs", "vtc")


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    lengths = (params["prompt_len"], params["output_len"])
    share = params["heavy_share"]
    if not 0 < share < 1:
        raise ValueError(f"param heavy_share must be in (0, 1), got {share!r}")
    tenants = (
        tr.poisson_tenant("heavy", share, *lengths),
        tr.poisson_tenant("light", 1.0 - share, *lengths),
    )
    return WorkloadSpec(tenants, seed=seed, max_duration_s=params["duration_s"])


def service_gap(served: tr.ServedRun, params: dict[str, Any]) -> dict[str, float]:
    """The run's gap, its bound and their ratio."""
    w_in, w_out = params["input_weight"], params["output_weight"]
    service = cumulative_service(served.steps, input_weight=w_in, output_weight=w_out)
    gap = max_service_gap(service, steps_backlog(served.steps))
    longest_prompt = float(served.requests["prompt_tokens"].max())
    most_running = float(served.steps[RUNNING_TOKENS].max())
    bound = 2.0 * max(w_in * longest_prompt, w_out * most_running)
    return {"gap": gap, "bound": bound, "gap_over_bound": tr.ratio(gap, bound)}


def window_throughput(requests: pd.DataFrame) -> float:
    """Output tokens per second produced between the first and the last arrival."""
    start, end = requests["arrival_s"].min(), requests["arrival_s"].max()
    times = np.concatenate([np.asarray(t, float) for t in requests["token_times_s"]])
    return tr.ratio(float(((times >= start) & (times <= end)).sum()), float(end - start))


def run(ctx: RunContext) -> None:
    """Record vtc_gap_over_bound, fcfs_gap_over_bound and throughput_cost_pct per trial."""
    params = DEFAULT_PARAMS | ctx.params
    engine = tr.experiment_engine(
        ctx,
        params,
        vtc_input_weight=params["input_weight"],
        vtc_output_weight=params["output_weight"],
    )
    saturation = tr.measure_saturation(engine, mix(params, ctx.seed), params["saturation_requests"])
    for trial in range(ctx.trials):
        spec = tr.at_load(mix(params, ctx.seed * 1000 + trial + 1), saturation, params["load"])
        requests = tr.workload_requests(spec, engine.model_cfg.vocab_size)
        results = {}
        for mode in tr.rotated(MODES, trial):
            engine = tr.reset_with(engine, scheduling_policy=mode)
            # Stop with the arrivals: what follows is the drain, not the overload.
            served = tr.serve(engine, requests, timeout_s=params["duration_s"])
            results[mode] = service_gap(served, params) | {
                "throughput": window_throughput(served.requests)
            }
            ctx.save_frames(requests=served.requests, steps=served.steps, mode=mode, trial=trial)
        labels = {"load": params["load"], "saturation_tok_s": saturation.output_tokens_per_s}
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
    params = DEFAULT_PARAMS | (json.loads(meta.read_text())["params"] if meta.is_file() else {})
    svg = tenant_charts.service_svg(
        steps, input_weight=params["input_weight"], output_weight=params["output_weight"]
    )
    return [("Cumulative service per tenant: FCFS and VTC", svg)]
