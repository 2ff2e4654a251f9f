"""admission-at-ingress: does bounded per-tenant admission keep admitted requests' TTFT in check?

``num_tenants`` equal tenants share one length mix with poisson arrivals. Each trial measures
its own saturation (the engine's service rate on the mix), then serves one stream of
requests three times, in an order that rotates from trial to trial:

    base       every request at ``base_load`` (50%) x saturation, no limits
    bounded    an overload episode, then recovery: ``overload`` (2x) x saturation for as long
               as the engine needs to serve ``episode_requests`` requests at saturation, then
               ``base_load`` for ``recovery_requests``' worth; per-tenant ingress limits
    unbounded  the same arrivals as bounded, no limits

The three arms serve the same requests (the stream's arrival times are warped, never
redrawn), and bounded and unbounded differ only in the limits. The limit caps each tenant's
waiting requests so that all tenants together queue at most ``queue_batches`` x
max_num_seqs requests (at least one each); a request over it is rejected at add time and
is not admitted. Every run is served to completion.

Metrics: admitted_p99_ttft_ratio (p99 TTFT of the admitted requests, bounded / base) and
unbounded_p99_ttft_ratio (unbounded / base). The service rate is the saturation
measured in every trial (lab/load/service_rate.py: a closed burst that keeps the batch full);
a trial's arrivals are built from the readings of the trials before it (their median; each
phase's work exact), and the overload episode's realised load, against the two bursts
bracketing the trial's arms, is recorded
per trial: a trial more than ``load_tolerance`` off ``overload`` is reported, not scored.

Why each condition can come out either way: the overload lasts a pre-registered number of
service units and is followed by recovery, so the unbounded queue peaks at a size set by
the episode and then drains; its p99 is a fixed quantity of the design, not one that grows
with however long the run is left going, and it is the same on a faster engine. Whether
that reaches 10x the base p99 depends on how the base-load TTFT tail compares with the
episode's backlog. The bounded arm's p99 depends on how much waiting the queue limit still
allows and on how much admitted work slows each step, which is what the claim is about.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), each one mechanism switched:
``limits-off`` (the bounded arm gets no ingress limits) and ``limits-everywhere`` (the
unbounded arm gets the bounded arm's limits).

Param ``device_step_s`` (0: the real device): every step of the trial, the service-rate
meter's included, takes that long on a device of a fixed step time (lab/engines/slow_device.py):
the counterfactual tests run there, where a tiny engine's millisecond steps do not leave the
tail to the host's noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from claimbench.engine.config_tenants import Tenant
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.slow_device import device_param
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "num_tenants": 4,
    "base_load": 0.5,
    "overload": 2.0,
    "load_tolerance": 0.25,  # the episode's realised load within 25%, or not scored
    "queue_batches": 1.0,
    "prompt_len": [16, 64],
    "output_len": [16, 48],
    "episode_requests": 96,
    "recovery_requests": 48,
    "saturation_requests": 32,
    # engine: replayed in process; http: through the OpenAI-compatible server, one API key
    # per tenant (saturation too: the load is in units of what the server can serve).
    "via": "engine",
    "device_step_s": 0.0,  # 0: the real device; else every step takes this long (seconds)
    "counterfactual": counterfactuals.NONE,
}
# Each counterfactual -> the arms that are served with the ingress limits.
COUNTERFACTUALS = {"limits-off": (), "limits-everywhere": ("bounded", "unbounded")}


def mix(params: dict[str, Any], seed: int) -> WorkloadSpec:
    """``num_tenants`` equal tenants (rates scaled later)."""
    lengths = (params["prompt_len"], params["output_len"])
    n = params["num_tenants"]
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"param num_tenants must be an integer >= 1, got {n!r}")
    tenants = tuple(tr.poisson_tenant(f"t{i}", 1.0 / n, *lengths) for i in range(n))
    return WorkloadSpec(tenants, seed=seed, max_requests=params["saturation_requests"])


def phases(params: dict[str, Any]) -> dict[str, list[tr.Phase]]:
    """Each arm's timeline. The base arm's one phase covers the same stretch of the request
    stream as the episode and recovery together, so it serves the same requests."""
    base, over = params["base_load"], params["overload"]
    episode, recovery = params["episode_requests"], params["recovery_requests"]
    if not 0 < base < 1 < over:
        raise ValueError(f"params need 0 < base_load < 1 < overload, got {base!r}, {over!r}")
    overloaded = [tr.Phase(episode, over), tr.Phase(recovery, base)]
    return {
        "base": [tr.Phase(episode * over / base + recovery, base)],
        "bounded": overloaded,
        "unbounded": overloaded,
    }


def ingress_limits(params: dict[str, Any], max_num_seqs: int) -> tuple[Tenant, ...]:
    """Each tenant's share of a queue of queue_batches x max_num_seqs requests."""
    n = params["num_tenants"]
    per_tenant = max(1, round(params["queue_batches"] * max_num_seqs / n))
    return tuple(Tenant(f"t{i}", max_queued_requests=per_tenant) for i in range(n))


def run(ctx: RunContext) -> None:
    """Record admitted_p99_ttft_ratio and unbounded_p99_ttft_ratio per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    limited = COUNTERFACTUALS.get(
        counterfactuals.chosen(params, tuple(COUNTERFACTUALS)), ("bounded",)
    )
    engine = ctx.engine(precompile=True, compile_cache=params["compile_cache"])
    with device_param(engine, params["device_step_s"]):
        _trials(ctx, engine, params, limited)


def _trials(
    ctx: RunContext, engine: LLMEngine, params: dict[str, Any], limited: tuple[str, ...]
) -> None:
    """Every trial of the run on ``engine`` (see run); ``limited``: the arms with limits."""
    timelines = phases(params)
    baseline = engine.config
    limits = ingress_limits(params, baseline.scheduler.max_num_seqs)
    vocab_size = engine.model_cfg.vocab_size
    meter = service_rate.SaturationMeter(
        engine, params["saturation_requests"], config=baseline, via=params["via"]
    )
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        saturation = meter.pace(mix(params, seed))
        arms = {
            mode: tr.Arm(
                tr.phased_requests(mix(params, seed), saturation, timeline, vocab_size),
                {"tenants": limits if mode in limited else ()},
            )
            for mode, timeline in timelines.items()
        }
        # The overload episode's realised load (the bounded and unbounded arms share it).
        longest = max(
            sum(saturation.seconds_for(p.service_requests) for p in timeline)
            for timeline in timelines.values()
        )
        served = tr.serve_arms(
            ctx,
            engine,
            baseline,
            arms,
            trial,
            timeout_s=tr.safety_timeout_s(longest),
            via=params["via"],
        )
        service = meter.measure(mix(params, seed))
        open_loop.record_episode_load(
            ctx,
            trial,
            arms["bounded"].requests,
            saturation,
            service,
            params,
            target=params["overload"],
        )
        p99 = {m: tr.percentile(tr.observed_ttft_s(r.requests), 99) for m, r in served.items()}
        rejected = {
            m: int((r.requests["finish_reason"] == "rejected").sum()) for m, r in served.items()
        }
        labels = {
            "p99_base_s": p99["base"],
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "num_requests": len(arms["base"].requests),
            "timed_out": any(r.timed_out for r in served.values()),
        }
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
