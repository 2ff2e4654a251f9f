"""fair-victim: does picking preemption victims by fair share save recompute and spare the top tier?

Three tenants of equal weight share a KV pool too small for a full batch (``kv_fraction`` of
what ``max_num_seqs`` requests of the longest kind would need): ``top`` (tier 0) sends
``top_share`` of the requests, the lower-tier ``mid`` and ``bulk`` (tier 1) the rest in the
ratio ``mid_share`` : 1 - top_share - mid_share. Each trial measures the engine's service
rate on this pool first, then offers an episode of poisson arrivals at ``load`` x that rate
for as long as the engine needs to serve ``episode_requests`` requests at saturation, and
serves it to completion twice, in an order that rotates across trials: under the ``newest``
victim policy (vLLM's default) and under ``fair-share`` (the tenant furthest above its
weighted share of the pool, then its request with the least work to recompute;
policies.py). That is the policy the claim states: it has no rule about tiers, so whether
a top-tier request is ever the victim is left to the workload (the top tier is preempted
whenever its tenant is the one furthest above its share). Nothing else differs. Both arms
order requests by strict tier (``scheduling_policy``): the ordering is the scheduler's, the
victim choice is what the claim is about.

Recomputed tokens are counted from the service ledger: every prompt token is input once,
and every token computed again after a preemption is input once more, so recompute = the
input tokens served - the prompt tokens of the requests served. That is the work really
redone: a preempted request's full blocks still in the prefix cache when it is readmitted
are taken by reference, not computed again.

Metrics: recompute_reduction_pct (100 * (newest - fair-share) / newest recomputed tokens)
and top_tier_preemptions (preemptions of tier-0 requests under fair-share). Its positive
control, top_tier_preemptions_control, is the same count under ``newest`` in the same
episode: a policy blind to tiers whose top-tier preemptions show that the load put the top
tier at risk at all. A zero under fair-share beside a zero control shows nothing.

The service rate is the saturation measured in every trial (lab/load/service_rate.py: a closed
burst that keeps the batch full, whatever the trial's load); a trial's arrivals are built
from the readings of the trials before it (their median; the episode's work exact), and
its realised load, taken against the two bursts bracketing its own arms, is recorded: a
trial more than ``load_tolerance`` off ``load`` is reported, not scored.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``fair-share-off``, the
fair-share arm chooses its victims by ``newest`` too (the policy blind to tenants' shares).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.engine.sched.fairness import INPUT_PREFIX
from claimbench.lab.engines import counterfactuals
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "scheduling_policy": "priority",
    "kv_fraction": 0.5,
    "load": 1.0,
    "load_tolerance": 0.25,  # realised load within 25% of load, or not scored
    "top_share": 0.2,
    "mid_share": 0.3,
    "prompt_len": [16, 64],
    "output_len": [32, 96],
    "episode_requests": 128,
    "saturation_requests": 64,
    "counterfactual": counterfactuals.NONE,
}
TIERS = {"top": 0, "mid": 1, "bulk": 1}
BASELINE, FAIR = "newest", "fair-share"
# Each counterfactual's arm -> the victim policy that arm is served by instead of its own.
COUNTERFACTUALS = {"fair-share-off": {FAIR: BASELINE}}


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """The three tenants at relative rates top_share : mid_share : the rest; bounded by the
    saturation burst's count (the episode takes its own span)."""
    lengths = (params["prompt_len"], params["output_len"])
    top, mid = params["top_share"], params["mid_share"]
    if not (top > 0 and mid > 0 and top + mid < 1):
        raise ValueError(f"params top_share={top!r} and mid_share={mid!r} must be > 0, sum < 1")
    shares = {"top": top, "mid": mid, "bulk": 1.0 - top - mid}
    tenants = tuple(
        tr.poisson_tenant(name, shares[name], *lengths, priority=tier)
        for name, tier in TIERS.items()
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=params["saturation_requests"])


def pool_pages(params: dict[str, Any]) -> int:
    """Usable pages: kv_fraction of a full batch of the longest requests."""
    engine = params["engine"]
    page_size = engine.get("page_size", DEFAULT_PAGE_SIZE)
    longest = params["prompt_len"][1] + params["output_len"][1]
    full_batch = engine.get("max_num_seqs", 32) * -(-longest // page_size)
    pages = int(params["kv_fraction"] * full_batch)
    if pages < -(-longest // page_size):
        raise ValueError(
            f"kv_fraction={params['kv_fraction']} leaves {pages} pages, fewer than one "
            f"{longest}-token request needs"
        )
    return pages


def recomputed_tokens(served: tr.ServedRun) -> int:
    """Tokens computed again after preemptions: input tokens served beyond the prompts.

    Only a run whose every request finished accounts for every prompt exactly once."""
    requests = served.requests
    if served.timed_out or not requests["completed"].all():
        raise ValueError("recompute is counted only on a run served to completion")
    last = served.steps.iloc[-1]
    served_input = sum(int(last[c]) for c in served.steps.columns if c.startswith(INPUT_PREFIX))
    return served_input - int(requests["prompt_tokens"].sum())


def top_tier_preemptions(requests: pd.DataFrame) -> int:
    """Preemptions suffered by tier-0 requests."""
    return int(requests.loc[requests["priority"] == TIERS["top"], "num_preemptions"].sum())


def run(ctx: RunContext) -> None:
    """Record recompute_reduction_pct, top_tier_preemptions and its control per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    swapped = COUNTERFACTUALS.get(counterfactuals.chosen(params, tuple(COUNTERFACTUALS)), {})
    pool = tr.kv_pool_bytes(ctx, params["engine"], pool_pages(params))
    engine = ctx.engine(
        precompile=True,
        compile_cache=params["compile_cache"],
        kv_pool_bytes=pool,
        scheduling_policy=params["scheduling_policy"],
    )
    baseline = engine.config
    vocab_size = engine.model_cfg.vocab_size
    meter = service_rate.SaturationMeter(engine, params["saturation_requests"], config=baseline)
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        saturation = meter.pace(mix(params, seed))
        phase = tr.Phase(params["episode_requests"], params["load"])
        requests = tr.phased_requests(mix(params, seed), saturation, [phase], vocab_size)
        arms = {
            mode: tr.Arm(requests, {"victim_policy": swapped.get(mode, mode)})
            for mode in (BASELINE, FAIR)
        }
        # The episode and its backlog to completion, with a safety margin.
        timeout_s = tr.safety_timeout_s(2 * saturation.seconds_for(params["episode_requests"]))
        served = tr.serve_arms(ctx, engine, baseline, arms, trial, timeout_s=timeout_s)
        service = meter.measure(mix(params, seed))
        open_loop.record_episode_load(ctx, trial, requests, saturation, service, params)
        recomputed = {mode: recomputed_tokens(r) for mode, r in served.items()}
        if recomputed[BASELINE] == 0:
            raise ValueError(
                "no preemption under the newest policy: the pool is not tight enough to compare "
                f"victim policies (kv_fraction={params['kv_fraction']}, load={params['load']})"
            )
        top = {mode: top_tier_preemptions(r.requests) for mode, r in served.items()}
        labels = {
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "num_requests": len(requests),
        }
        reduction = 100.0 * (recomputed[BASELINE] - recomputed[FAIR]) / recomputed[BASELINE]
        ctx.record(
            "recompute_reduction_pct",
            reduction,
            trial=trial,
            unit="%",
            recomputed_newest=recomputed[BASELINE],
            recomputed_fair_share=recomputed[FAIR],
            **labels,
        )
        ctx.record("top_tier_preemptions", top[FAIR], trial=trial, unit="preemptions", **labels)
        ctx.record(
            "top_tier_preemptions_control",
            top[BASELINE],
            trial=trial,
            unit="preemptions",
            victim_policy=BASELINE,
            **labels,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs under each victim policy."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tenant by victim policy")
