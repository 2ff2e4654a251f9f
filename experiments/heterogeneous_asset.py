"""heterogeneous-asset: a prefill-heavy and a decode-heavy tenant, co-located vs time-sliced.

Two tenants with opposite shapes share one engine: "prefill" sends long prompts and wants
short answers, "decode" sends short prompts and wants long answers (``prefill_share`` of the
requests are prefill's). Each trial's arrivals are built from the engine's saturation on the
mix read by the trials before it (lab/load/service_rate.py: closed bursts that keep the batch
full; their median, the episode's work exact), and its realised load is taken against the
two bursts bracketing its own arms (a
trial more than ``load_tolerance`` off ``load`` is reported, not scored). Each trial
measures each
tenant's isolated latency (``probe_requests`` of its requests served alone, one at a time:
median TTFT and TPOT), then serves the same requests in each arm twice on the same engine,
interleaved ABBA (the first arm rotating from trial to trial), so a drift in the host's
speed over the trial falls on both arms alike:

* together: both tenants' requests share every step (chunked prefill beside decodes);
* sliced: windows of equal length alternate between the tenants (lab/load/time_slicing.py):
  in a tenant's window only its requests run, a request arriving in the other's window
  waits, and one unfinished at its window's end pauses until its tenant's next window.

Arrivals are Poisson at ``load`` x the trial's saturation for the time the engine needs to
serve ``episode_requests`` requests of the mix (service units), then drained; a window lasts
the time it needs to serve ``window_requests``. A request is good when it completes within
its tenant's SLOs: TTFT <= slo_scale[tenant]["ttft"] x the tenant's isolated TTFT and TPOT <=
slo_scale[tenant]["tpot"] x its isolated TPOT (SLOs as multiples of the trial's own isolated
latency, so they mean the same on any hardware; the scales are fixed in claims.yaml). Goodput
is good requests per second of the arrival span, the same span for both arms, each arm's good
requests summed over its two runs, so the gain is 100 x (good together - good sliced) / good
sliced (a sliced arm with no good request counts as one: the gain is then a lower bound).
A single run per arm made the gain noise at small sizes on a shared host: two identically
sliced arms, served one after the other, measured +81% and +1000% (10 good requests against
none), as the host's load moved between them.

Why it can come out either way: co-location fills decode steps' idle compute with prefill
chunks, but a long prefill chunk in the same step also slows every decode of that step (the
decode tenant's TPOT); slicing keeps steps pure but makes each tenant wait for its window.
On an accelerator a decode step is bandwidth-bound and prefill compute-bound, so mixing
is nearly free; on a CPU both are compute-bound, which is why this claim is scoped to
accelerators and CPU runs are indicative.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``co-location-off``, the
together arm is time-sliced too.

Param ``device_step_s`` (0: the real device): every step of the trial, the saturation
meter's, the isolated probes' and both arms', takes that long on the device
(lab/engines/slow_device.py). A step time that dwarfs the host's work makes the trial's timing, and
so which requests meet their SLOs, a matter of step counts rather than of a busy host's
jitter: at tiny size on a CPU, two identically sliced arms then serve near-identically.

Params (claims.yaml, per profile): engine, compile_cache, load, prefill_share,
prefill_prompt_len, prefill_output_len, decode_prompt_len, decode_output_len ([lo, hi]
uniform), episode_requests, saturation_requests, window_requests, probe_requests, slo_scale,
counterfactual, device_step_s.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.slow_device import slow_device
from claimbench.lab.figures import tenant_charts
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.load.time_slicing import serve_time_sliced
from claimbench.workload.build import WorkloadRequest
from claimbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "load": 0.8,
    "load_tolerance": 0.25,  # realised load within 25% of load, or not scored
    "prefill_share": 0.5,
    "prefill_prompt_len": [256, 480],
    "prefill_output_len": [4, 12],
    "decode_prompt_len": [8, 32],
    "decode_output_len": [96, 160],
    "episode_requests": 48,
    "saturation_requests": 48,
    "window_requests": 2,
    "probe_requests": 3,
    "slo_scale": {"prefill": {"ttft": 10.0, "tpot": 5.0}, "decode": {"ttft": 10.0, "tpot": 5.0}},
    "counterfactual": counterfactuals.NONE,
    "device_step_s": 0.0,  # 0: the real device; else every step takes this long (seconds)
}
TENANTS = ("prefill", "decode")
MODES = ("together", "sliced")
COUNTERFACTUALS = ("co-location-off",)


def mix(params: dict[str, Any], seed: int, *, tenants: tuple[str, ...] = TENANTS) -> WorkloadSpec:
    """The named tenants at relative rates prefill_share : 1 - prefill_share."""
    share = params["prefill_share"]
    if not 0 < share < 1:
        raise ValueError(f"param prefill_share must be in (0, 1), got {share!r}")
    rates = {"prefill": share, "decode": 1.0 - share}
    loads = tuple(
        tr.poisson_tenant(t, rates[t], params[f"{t}_prompt_len"], params[f"{t}_output_len"])
        for t in tenants
    )
    return WorkloadSpec(loads, seed=seed, max_requests=params["saturation_requests"])


def isolated_latency(engine: LLMEngine, requests: list[WorkloadRequest]) -> dict[str, float]:
    """Median TTFT and TPOT of ``requests`` served one at a time on the emptied engine."""
    ttft, tpot = [], []
    for r in requests:
        engine.reset()
        engine.generate(
            [list(r.prompt_token_ids)], SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
        )
        row = engine.requests_frame().iloc[0]
        ttft.append(row["ttft_s"])
        tpot.append(row["tpot_s"])
    return {"ttft": float(np.nanmedian(ttft)), "tpot": float(np.nanmedian(tpot))}


def slos(params: dict[str, Any], isolated: dict[str, dict[str, float]]) -> dict[str, dict]:
    """Per tenant: {"ttft": s, "tpot": s}, the scales times the isolated latencies."""
    scale = params["slo_scale"]
    if set(scale) != set(TENANTS) or any(set(scale[t]) != {"ttft", "tpot"} for t in TENANTS):
        raise ValueError(f"param slo_scale needs ttft and tpot for {TENANTS}, got {scale!r}")
    return {t: {k: scale[t][k] * isolated[t][k] for k in ("ttft", "tpot")} for t in TENANTS}


def good(requests: pd.DataFrame, slo: dict[str, dict[str, float]]) -> pd.Series:
    """Whether each request completed within its tenant's TTFT and TPOT objectives (a
    one-token answer has no TPOT, so only its TTFT counts)."""
    ttft = requests["tenant"].map(lambda t: slo[t]["ttft"])
    tpot = requests["tenant"].map(lambda t: slo[t]["tpot"])
    tpot_ok = requests["tpot_s"].isna() | (requests["tpot_s"] <= tpot)
    return requests["completed"].astype(bool) & (requests["ttft_s"] <= ttft) & tpot_ok


def serve_arm(
    engine: LLMEngine,
    mode: str,
    requests: list[WorkloadRequest],
    *,
    window_s: float,
    order: tuple[str, ...],
    timeout_s: float,
) -> tr.ServedRun:
    """One arm from an emptied engine: co-located, or time-sliced in windows of window_s."""
    engine.reset()
    if mode == "together":
        return tr.serve(engine, requests, timeout_s)
    return serve_time_sliced(engine, requests, order, window_s, timeout_s)


def run(ctx: RunContext) -> None:
    """Record goodput_gain_pct per trial, with each arm's goodput and attainment beside."""
    params = ctx.merged(DEFAULT_PARAMS)
    step_s = params["device_step_s"]
    if isinstance(step_s, bool) or not isinstance(step_s, int | float) or not 0 <= step_s < 10:
        raise ValueError(f"param device_step_s must be seconds in [0, 10), got {step_s!r}")
    sliced_only = counterfactuals.chosen(params, COUNTERFACTUALS) == "co-location-off"
    engine = ctx.engine(precompile=True, compile_cache=params["compile_cache"])
    with slow_device(engine, step_s) if step_s else nullcontext():
        _trials(ctx, engine, params, sliced_only=sliced_only)


def _trials(
    ctx: RunContext, engine: LLMEngine, params: dict[str, Any], *, sliced_only: bool
) -> None:
    """Every trial of the run on ``engine`` (see run); sliced_only slices both arms."""
    vocab = engine.model_cfg.vocab_size
    meter = service_rate.SaturationMeter(engine, params["saturation_requests"])
    for trial in range(ctx.trials):
        seed = tr.trial_seed(ctx, trial)
        spec = mix(params, seed)
        saturation = meter.pace(spec)
        isolated = {}
        for tenant in TENANTS:
            probe = mix(params, seed + 7919, tenants=(tenant,))
            probes = tr.workload_requests(probe, vocab)[: params["probe_requests"]]
            isolated[tenant] = isolated_latency(engine, probes)
        slo = slos(params, isolated)
        phase = tr.Phase(params["episode_requests"], params["load"])
        requests = tr.phased_requests(spec, saturation, [phase], vocab)
        window_s = saturation.seconds_for(params["window_requests"])
        timeout_s = tr.safety_timeout_s(2 * saturation.seconds_for(params["episode_requests"]))
        order = tuple(tr.rotated(list(TENANTS), trial))  # who gets the first window
        served: dict[str, list[tr.ServedRun]] = {mode: [] for mode in MODES}
        first, second = tr.rotated(list(MODES), trial)
        for rep, mode in enumerate((first, second, second, first)):
            arm = serve_arm(
                engine,
                "sliced" if sliced_only else mode,
                requests,
                window_s=window_s,
                order=order,
                timeout_s=timeout_s,
            )
            served[mode].append(arm)
            ctx.save_frames(
                requests=arm.requests, steps=arm.steps, mode=mode, trial=trial, rep=rep // 2
            )
        service = meter.measure(spec)
        open_loop.record_episode_load(ctx, trial, requests, saturation, service, params)
        span_s = requests[-1].arrival_s - requests[0].arrival_s
        num_good = {
            mode: sum(int(good(s.requests, slo).sum()) for s in runs)
            for mode, runs in served.items()
        }
        labels = {
            "load": params["load"],
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "window_s": window_s,
            "num_requests": len(requests),
            "slo": slo,
            "timed_out": any(s.timed_out for runs in served.values() for s in runs),
        }
        gain = 100.0 * (num_good["together"] - num_good["sliced"]) / max(num_good["sliced"], 1)
        ctx.record("goodput_gain_pct", gain, trial=trial, unit="%", good=num_good, **labels)
        for mode, runs in served.items():
            goodput = num_good[mode] / (len(runs) * span_s)
            ctx.record("goodput", goodput, trial=trial, unit="req/s", mode=mode)
            for tenant in TENANTS:
                # Over the workload's requests: one a timeout left unserved counts as missed.
                sent = len(runs) * sum(r.tenant == tenant for r in requests)
                met = sum(
                    int(good(s.requests, slo)[s.requests["tenant"] == tenant].sum()) for s in runs
                )
                attained = 100.0 * met / max(sent, 1)
                ctx.record(
                    "slo_attainment_pct", attained, trial=trial, unit="%", mode=mode, tenant=tenant
                )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """TTFT per tenant, co-located beside time-sliced (newest run, every trial)."""
    return tenant_charts.ttft_cdf_figures(
        run_dirs, title="TTFT per tenant: co-located and time-sliced"
    )
