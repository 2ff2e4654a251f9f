"""fair-victim: does picking preemption victims by fair share save recompute and spare the top tier?

Three tenants of equal weight share a KV pool too small for a full batch (``kv_fraction`` of
what ``max_num_seqs`` requests of the longest kind would need): ``top`` (tier 0) sends
``top_share`` of the requests, the lower-tier ``mid`` and ``bulk`` the rest in the ratio
``mid_share`` : 1 - top_share - mid_share. Arrivals are poisson at ``load`` x the saturation
output throughput measured first on this pool. Each trial serves the same arrivals under the
``newest`` victim policy (vLLM's) and under ``fair-share`` (the order rotating from trial to
trial), FCFS ordering both times, and
counts the tokens preemptions threw away (each must be computed again).

Metrics: recompute_reduction_pct (100 * (newest - fair-share) / newest recomputed tokens) and
top_tier_preemptions (preemptions of tier-0 requests under fair-share).
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
    "kv_fraction": 0.5,
    "load": 1.0,
    "top_share": 0.2,
    "mid_share": 0.3,
    "prompt_len": [16, 64],
    "output_len": [32, 96],
    "duration_s": 12.0,
    "drain_s": 6.0,
    "saturation_requests": 32,
}
TIERS = {"top": 0, "mid": 1, "bulk": 1}
MODES = ("newest", "fair-share")


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    lengths = (params["prompt_len"], params["output_len"])
    top, mid = params["top_share"], params["mid_share"]
    if not (top > 0 and mid > 0 and top + mid < 1):
        raise ValueError(f"params top_share={top!r} and mid_share={mid!r} must be > 0, sum < 1")
    shares = {"top": top, "mid": mid, "bulk": 1.0 - top - mid}
    tenants = tuple(
        tr.poisson_tenant(name, shares[name], *lengths, priority=tier)
        for name, tier in TIERS.items()
    )
    return WorkloadSpec(tenants, seed=seed, max_duration_s=params["duration_s"])


def pool_pages(params: dict[str, Any]) -> int:
    """Usable pages: kv_fraction of a full batch of the longest requests."""
    engine = params["engine"]
    page_size = engine.get("page_size", 16)
    longest = params["prompt_len"][1] + params["output_len"][1]
    full_batch = engine.get("max_num_seqs", 32) * -(-longest // page_size)
    pages = int(params["kv_fraction"] * full_batch)
    if pages < -(-longest // page_size):
        raise ValueError(
            f"kv_fraction={params['kv_fraction']} leaves {pages} pages, fewer than one "
            f"{longest}-token request needs"
        )
    return pages


def run(ctx: RunContext) -> None:
    """Record recompute_reduction_pct and top_tier_preemptions per trial."""
    params = DEFAULT_PARAMS | ctx.params
    pool = tr.kv_pool_bytes(ctx, params["engine"], pool_pages(params))
    engine = tr.experiment_engine(ctx, params, kv_pool_bytes=pool)
    saturation = tr.measure_saturation(engine, mix(params, ctx.seed), params["saturation_requests"])
    timeout_s = params["duration_s"] + params["drain_s"]
    for trial in range(ctx.trials):
        spec = tr.at_load(mix(params, ctx.seed * 1000 + trial + 1), saturation, params["load"])
        requests = tr.workload_requests(spec, engine.model_cfg.vocab_size)
        recomputed, top_preemptions = {}, {}
        for mode in tr.rotated(MODES, trial):
            engine = tr.reset_with(engine, victim_policy=mode)
            served = tr.serve(engine, requests, timeout_s)
            recomputed[mode] = sum(engine.scheduler.service.preempted_tokens.values())
            top = served.requests["priority"] == TIERS["top"]
            top_preemptions[mode] = int(served.requests.loc[top, "num_preemptions"].sum())
            ctx.save_frames(requests=served.requests, steps=served.steps, mode=mode, trial=trial)
        if recomputed["newest"] == 0:
            raise ValueError(
                "no preemption under the newest policy: the pool is not tight enough to compare "
                f"victim policies (kv_fraction={params['kv_fraction']}, load={params['load']})"
            )
        labels = {
            "recomputed_newest": recomputed["newest"],
            "recomputed_fair_share": recomputed["fair-share"],
            "saturation_tok_s": saturation.output_tokens_per_s,
        }
        reduction = 100.0 * (recomputed["newest"] - recomputed["fair-share"]) / recomputed["newest"]
        ctx.record("recompute_reduction_pct", reduction, trial=trial, unit="%", **labels)
        ctx.record(
            "top_tier_preemptions",
            top_preemptions["fair-share"],
            trial=trial,
            unit="preemptions",
            top_tier_preemptions_newest=top_preemptions["newest"],
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-tenant TTFT CDFs under each victim policy."""
    return tenant_charts.ttft_cdf_figures(run_dirs, title="TTFT per tenant by victim policy")
