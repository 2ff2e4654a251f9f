"""degradation-ladder: at 2x the sustainable load, does a ladder chosen in advance keep the
premium tier within its SLO, while without one every tier misses its SLO?

Three tiers share one length mix with poisson arrivals: premium (tier 0), standard (tier 1)
and best effort (tier 2), each offering its ``share`` of the load. Each trial is paced by
the service rate on the mix at saturation that the trials before it measured
(lab/load/service_rate.py: closed bursts that keep the batch full; ``mu`` requests/s, one
"request time" is 1 / mu), then offers ``overload`` (2x) that rate for as long as the
engine needs to serve ``episode_requests`` requests at that rate; arrivals then stop and
every admitted request is served to completion. The same requests are served twice, and the
control's once, in an order that rotates from trial to trial:

    ladder   the engine config carries ``ladder`` (the params' rungs, engine/sched/ladder.py): it
             climbs and descends on the load signals it observes each step
    none     no ladder
    control  no ladder, the same span of arrivals at ``control_load`` (below the service
             rate): the positive control of tiers_meeting_slo_without

Both arms use the same ordering (``scheduling_policy``, the engine's default fcfs): the
ladder is the only tier-aware mechanism, so the comparison is ladder versus none, not
ladder plus a priority queue versus none.

Each tier's SLO is fixed in the params before the run, in service units so it means the
same on any engine: TTFT at most ``ttft_slo_batches`` batch times (max_num_seqs request
times: the time a full batch's worth of requests takes at the service rate), and TPOT at
most ``tpot_slo_x`` times the full-batch TPOT (max_num_seqs / the service rate in output
tokens per second). A request meets its SLO if it completed within both; one shed, aborted
or unfinished misses it. A tier meets its SLO when at least ``attainment_pct`` of its
requests do.

Metrics: premium_slo_attainment_pct (with the ladder: % of premium requests within the
premium SLO) and tiers_meeting_slo_without (without it: how many tiers meet theirs), with
its control tiers_meeting_slo_without_control (the same count under the control's light
load, where tiers can meet their SLOs: a zero there would mean the count cannot see a tier
meet). The realised load of every trial is recorded (the episode's offered output tokens/s
over the saturation measured by the bursts bracketing the trial's arms,
RunContext.record_realised_load): a trial more than ``load_tolerance`` off ``overload`` did
not run the design and is not scored.

Why each can come out either way: without a ladder the fcfs queue grows by (overload - 1)
requests per request time, so at 2x a request arriving t request times into the episode
waits about t, and a tier's attainment is about its TTFT objective over the episode's
length (both in request times). The episode is sized so that the overload is unmistakable:
its length is several times the loosest tier's TTFT objective, so that fluid estimate puts
every tier far below its target (an episode that put best effort at its own target would
leave "every tier misses" to noise); whether the engine's real queueing (batching, chunked
prefill, the spread of output lengths) lets a tier meet its SLO anyway is what is measured.
With the ladder the premium tier is never shed or capped: its TTFT is the wait behind
whatever queue the ladder lets stand, plus its own bursts, and whether that stays under its
objective for 99% of its requests is measured over enough premium requests (pooled over the
trials) for an exact interval on a 100% share to clear 99%.

Manipulation check, per trial: ``late_wait_over_loosest_slo`` (and ``_control``) is the
median TTFT of the last quarter of the requests to arrive, in the no-ladder arm (the
control's), over the loosest tier's TTFT objective: well above 1 shows the overload
the design intends (even best effort waits past its objective by the episode's end), below
1 the control's light load. ``num_premium_requests`` counts the premium requests a trial
judged.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py): ``ladder-off`` (the ladder arm
serves without its ladder) and ``overload-off`` (the episode offered at ``control_load``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.config_ladder import as_ladder
from claimbench.engine.config_tenants import Tenant
from claimbench.harness import evidence_rules
from claimbench.lab.engines import counterfactuals
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

PREMIUM = "premium"
TIER_FIELDS = ("tier", "share", "ttft_slo_batches", "tpot_slo_x", "attainment_pct")
DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "overload": 2.0,
    "load_tolerance": 0.25,  # a trial's realised load within 25% of overload, or not scored
    "control_load": 0.5,  # the control arm's load, in service units
    "episode_requests": 36,
    "scheduling_policy": "fcfs",
    "tiers": {
        PREMIUM: {
            "tier": 0,
            "share": 0.2,
            "ttft_slo_batches": 1,
            "tpot_slo_x": 2.0,
            "attainment_pct": 99,
        },
        "standard": {
            "tier": 1,
            "share": 0.3,
            "ttft_slo_batches": 2,
            "tpot_slo_x": 3.0,
            "attainment_pct": 95,
        },
        "best_effort": {
            "tier": 2,
            "share": 0.5,
            "ttft_slo_batches": 4,
            "tpot_slo_x": 4.0,
            "attainment_pct": 90,
        },
    },
    # Rungs in waiting requests (queue depth): a count that means the same on any engine.
    "ladder": [
        {
            "action": "shed_tier_at_ingress",
            "tier": 2,
            "signal": "waiting_requests",
            "engage": 2,
            "release": 0,
        },
        {
            "action": "cap_max_tokens",
            "tier": 1,
            "max_tokens": 8,
            "signal": "waiting_requests",
            "engage": 4,
            "release": 1,
        },
        {
            "action": "shed_tier_at_ingress",
            "tier": 1,
            "signal": "waiting_requests",
            "engage": 6,
            "release": 2,
        },
    ],  # fmt: skip
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "saturation_requests": 32,
    "counterfactual": counterfactuals.NONE,
}
MODES = ("ladder", "none", "control")
COUNTERFACTUALS = ("ladder-off", "overload-off")
LATE_SHARE = 0.25  # the last quarter of the arrivals: where the queue has grown the longest


def late_wait_over_slo(requests: pd.DataFrame, ttft_slo_s: float) -> float:
    """Median TTFT of the last LATE_SHARE of the requests to arrive, over ``ttft_slo_s``; a
    request that never got a first token (shed) is left out. NaN if none is left."""
    arrival_s = requests["arrival_s"]
    late = requests[arrival_s >= arrival_s.quantile(1.0 - LATE_SHARE)]
    ttft = late["ttft_s"].dropna()
    return float(ttft.median() / ttft_slo_s) if len(ttft) else float("nan")


def check_tiers(tiers: Any) -> dict[str, dict[str, float]]:
    """The tiers param, checked: every field present, shares and objectives > 0, a premium."""
    if not isinstance(tiers, dict) or PREMIUM not in tiers:
        raise ValueError(f"param tiers must map tier names (one of them {PREMIUM!r}) to specs")
    for name, spec in tiers.items():
        if not isinstance(spec, dict) or set(spec) != set(TIER_FIELDS):
            raise ValueError(f"param tiers.{name} needs exactly {TIER_FIELDS}, got {spec!r}")
        for field in TIER_FIELDS[1:]:
            if not spec[field] > 0:
                raise ValueError(f"param tiers.{name}.{field} must be > 0, got {spec[field]!r}")
        if not spec["attainment_pct"] <= 100:
            raise ValueError(f"param tiers.{name}.attainment_pct must be <= 100")
    return tiers


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """One poisson tenant per tier at rates proportional to its share (scaled later)."""
    lengths = (params["prompt_len"], params["output_len"])
    tenants = tuple(
        tr.poisson_tenant(name, spec["share"], *lengths, priority=spec["tier"])
        for name, spec in params["tiers"].items()
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=params["saturation_requests"])


def slo_seconds(
    params: dict[str, Any], saturation: tr.Saturation, max_num_seqs: int
) -> dict[str, tuple[float, float]]:
    """Each tier's (TTFT, TPOT) objective in this trial's seconds."""
    full_batch_tpot_s = max_num_seqs / saturation.output_tokens_per_s
    return {
        name: (
            saturation.seconds_for(spec["ttft_slo_batches"] * max_num_seqs),
            spec["tpot_slo_x"] * full_batch_tpot_s,
        )
        for name, spec in params["tiers"].items()
    }


def slo_attainment_pct(
    requests: pd.DataFrame, slos: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """Per tier, % of its requests that completed within its TTFT and TPOT objectives.

    ``requests`` is a requests frame (metrics.requests_frame); ttft_s and tpot_s are NaN for
    a request that did not complete (shed, aborted), which therefore misses. A one-token
    answer has no TPOT and is judged on TTFT alone. A tier with no requests gets NaN."""
    out = {}
    for name, (ttft_s, tpot_s) in slos.items():
        rows = requests[requests["tenant"] == name]
        if rows.empty:
            out[name] = float("nan")
            continue
        within = (
            rows["completed"].astype(bool)
            & (rows["ttft_s"] <= ttft_s)
            & (rows["tpot_s"].isna() | (rows["tpot_s"] <= tpot_s))
        )
        out[name] = 100.0 * float(within.mean())
    return out


def ladder_labels(served: tr.ServedRun, ladder_len: int) -> dict[str, Any]:
    """What the ladder did in one run: steps per rung, moves, requests shed and capped."""
    rungs = served.steps["ladder_rung"].to_numpy() if len(served.steps) else np.zeros(0, int)
    requests = served.requests
    reasons = requests["rejected_reason"].fillna("")
    return {
        "steps_per_rung": [int((rungs == k).sum()) for k in range(ladder_len + 1)],
        "rung_moves": int(np.count_nonzero(np.diff(rungs))) if len(rungs) > 1 else 0,
        "num_shed": int(reasons.str.contains("ladder_shed=").sum()),
    }


def run(ctx: RunContext) -> None:
    """Record premium_slo_attainment_pct, tiers_meeting_slo_without (and its control) and the
    realised load per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    check_tiers(params["tiers"])
    if not params["overload"] > 1:
        raise ValueError(f"param overload must be > 1, got {params['overload']!r}")
    if not 0 < params["control_load"] < 1:
        raise ValueError(f"param control_load must be in (0, 1), got {params['control_load']!r}")
    counterfactual = counterfactuals.chosen(params, COUNTERFACTUALS)
    ladder = as_ladder(params["ladder"])
    engine = ctx.engine(
        precompile=True,
        compile_cache=params["compile_cache"],
        scheduling_policy=params["scheduling_policy"],
    )
    # A ladder in the engine params would act in both arms: the baseline has none.
    plain = dataclasses.replace(engine.config, ladder=())
    vocab_size = engine.model_cfg.vocab_size
    load = params["control_load"] if counterfactual == "overload-off" else params["overload"]
    episode = [tr.Phase(params["episode_requests"], load)]
    light = [tr.Phase(params["episode_requests"], params["control_load"])]
    meter = service_rate.SaturationMeter(engine, params["saturation_requests"], config=plain)
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        saturation = meter.pace(mix(params, seed))
        slos = slo_seconds(params, saturation, engine.config.scheduler.max_num_seqs)
        # The SLOs travel in the tenants' config (provenance); neither arm acts on them.
        tenants = tuple(
            Tenant(name, priority=spec["tier"], ttft_slo_s=slos[name][0], tpot_slo_s=slos[name][1])
            for name, spec in params["tiers"].items()
        )
        baseline = dataclasses.replace(plain, tenants=tenants)
        requests = tr.phased_requests(mix(params, seed), saturation, episode, vocab_size)
        arms = {
            "ladder": tr.Arm(
                requests, {} if counterfactual == "ladder-off" else {"ladder": ladder}
            ),
            "none": tr.Arm(requests, {}),
            "control": tr.Arm(tr.phased_requests(mix(params, seed), saturation, light, vocab_size)),
        }
        # Served to completion: the episode's work at saturation, with a safety margin.
        work_s = saturation.seconds_for(params["episode_requests"] * params["overload"])
        served = tr.serve_arms(
            ctx, engine, baseline, arms, trial, timeout_s=tr.safety_timeout_s(work_s)
        )
        attainment = {mode: slo_attainment_pct(served[mode].requests, slos) for mode in MODES}
        meeting = {
            mode: [
                name
                for name, spec in params["tiers"].items()
                if attainment[mode][name] >= spec["attainment_pct"]
            ]
            for mode in ("none", "control")
        }
        service = meter.measure(mix(params, seed))
        open_loop.record_episode_load(
            ctx, trial, requests, saturation, service, params, target=load
        )
        steady_tok_s = open_loop.steady_service_tok_s(served["none"])
        loosest_ttft_s = max(ttft_s for ttft_s, _ in slos.values())
        for mode, metric in (("none", ""), ("control", "_control")):
            ctx.record(
                f"late_wait_over_loosest_slo{metric}",
                late_wait_over_slo(served[mode].requests, loosest_ttft_s),
                trial=trial,
                unit="x",
                loosest_ttft_slo_s=loosest_ttft_s,
            )
        premium_rows = served["ladder"].requests["tenant"] == PREMIUM
        ctx.record("num_premium_requests", int(premium_rows.sum()), trial=trial, unit="requests")
        labels = {
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "episode_service_tok_s": steady_tok_s,
            "request_time_s": saturation.seconds_for(1),
            "num_requests": len(requests),
            "attainment_ladder_pct": attainment["ladder"],
            "attainment_none_pct": attainment["none"],
            "timed_out": any(r.timed_out for r in served.values()),
        }
        ctx.record(
            "premium_slo_attainment_pct",
            attainment["ladder"][PREMIUM],
            trial=trial,
            unit="%",
            premium_ttft_slo_s=slos[PREMIUM][0],
            premium_tpot_slo_s=slos[PREMIUM][1],
            **ladder_labels(served["ladder"], len(ladder)),
            **labels,
        )
        # The counts behind the share (premium requests within their SLO, premium requests), so
        # scoring pools them over trials.
        is_premium = served["ladder"].requests["tenant"] == PREMIUM
        num_premium = int(is_premium.sum())
        num_within = round(attainment["ladder"][PREMIUM] * num_premium / 100.0)
        for metric, count in zip(
            evidence_rules.count_metrics("premium_slo_attainment_pct"),
            (num_within, num_premium),
            strict=True,
        ):
            ctx.record(metric, count, trial=trial, unit="count")
        ctx.record(
            "tiers_meeting_slo_without",
            float(len(meeting["none"])),
            trial=trial,
            unit="tiers",
            tiers_meeting=meeting["none"],
            **labels,
        )
        ctx.record(
            "tiers_meeting_slo_without_control",
            float(len(meeting["control"])),
            trial=trial,
            unit="tiers",
            tiers_meeting=meeting["control"],
            attainment_control_pct=attainment["control"],
            control_load=params["control_load"],
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tier TTFT CDFs with the ladder and without."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tier, ladder and none")
