"""Shared steps of the multi-tenant experiments: saturation, load levels, serving, percentiles.

Load levels are fractions of a saturation throughput measured on the running hardware, so
"90% load" means the same thing on a laptop CPU and on a TPU: the engine's output tokens per
second with its batch kept full on the experiment's own request mix (service_rate.py). A
workload is then scaled so that its offered output tokens per second is the wanted fraction
of that.

Every trial measures its own saturation (the host's speed drifts, and that drift belongs in
the trial-to-trial spread the confidence interval is built from), and durations are given
in service units too: ``Saturation.seconds_for(n)`` is the time the engine needs to serve n
requests of the mix at saturation. An experiment written in these units runs the same on a
faster engine, only quicker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.kv.kv_cache import pool_bytes_for
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.sched.fairness import BACKLOG_PREFIX, OUTPUT_PREFIX
from claimbench.models.checkpoint import read_config
from claimbench.serving.clients.replay import replay
from claimbench.workload.build import WorkloadRequest, build_requests
from claimbench.workload.lengths import UniformLength
from claimbench.workload.spec import (
    WorkloadSpec,
    offered_requests_per_s,
    scale_rates,
    tenant_rate,
)
from claimbench.workload.tenants import TenantLoad
from claimbench.workload.tokens import random_token_source

if TYPE_CHECKING:
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

# Outputs run to max_tokens: lengths are the workload's, not the model's whim.
SERVE_SAMPLING = SamplingParams(ignore_eos=True)
# A run "to completion" still gets a deadline, so a stalled engine cannot hang a trial:
# this many times the run's expected length in service units, and never under the floor.
SAFETY_FACTOR, SAFETY_FLOOR_S = 20.0, 60.0


@dataclass(frozen=True)
class Saturation:
    """The engine's full-batch throughput on one request mix."""

    output_tokens_per_s: float
    requests_per_s: float  # output_tokens_per_s / the mix's expected output tokens
    num_requests: int  # in the burst (bursts)
    readings: tuple[float, ...] = ()  # output tokens/s of each burst pooled into this one

    def seconds_for(self, num_requests: float) -> float:
        """The time the engine needs to serve ``num_requests`` requests of the mix at
        saturation: the unit experiments give their windows in."""
        if not num_requests >= 0:
            raise ValueError(f"num_requests must be >= 0, got {num_requests!r}")
        return num_requests / self.requests_per_s


@dataclass(frozen=True)
class ServedRun:
    """One workload served by one engine: its own requests' and steps' records."""

    requests: pd.DataFrame  # metrics.requests_frame rows of this run's requests
    steps: pd.DataFrame  # metrics.steps_frame rows of this run's steps
    duration_s: float
    timed_out: bool


def kv_pool_bytes(ctx: RunContext, engine_params: dict[str, Any], num_usable_pages: int) -> int:
    """kv_pool_bytes that holds exactly ``num_usable_pages`` pages (plus the null page) of
    the run's model under the engine params' dtype, kv_dtype and page_size."""
    options = {"dtype": ctx.dtype} | engine_params
    return pool_bytes_for(read_config(ctx.model_path), options, num_usable_pages)


def reset_with(engine: LLMEngine, **changes: Any) -> LLMEngine:
    """``engine`` emptied for a fresh run under its config with host-side ``changes``
    (policies, tenants); the compiled steps are kept."""
    engine.reset(dataclasses.replace(engine.config, **changes))
    return engine


def rotated(modes: Sequence[str], trial: int) -> list[str]:
    """``modes`` started at position trial % len(modes): across trials each mode runs in
    each position, so a drift in the machine's speed (a shared host) favours none."""
    k = trial % len(modes)
    return [*modes[k:], *modes[:k]]


def uniform(bounds: list[int] | tuple[int, int]) -> UniformLength:
    """A [lo, hi] params pair as a length distribution."""
    lo, hi = bounds
    return UniformLength(int(lo), int(hi))


def poisson_tenant(
    name: str,
    rate: float,
    prompt_len: list[int] | tuple[int, int],
    output_len: list[int] | tuple[int, int],
    *,
    priority: int = 0,
) -> TenantLoad:
    """A poisson TenantLoad with uniform [lo, hi] prompt and output lengths."""
    return TenantLoad(
        name,
        arrival="poisson",
        rate=rate,
        prompt_len=uniform(prompt_len),
        output_len=uniform(output_len),
        priority=priority,
    )


def workload_requests(spec: WorkloadSpec, vocab_size: int) -> list[WorkloadRequest]:
    """The spec's requests with random prompt ids (content does not change timing)."""
    return build_requests(spec, random_token_source(vocab_size))


def offered_output_tokens_per_s(spec: WorkloadSpec) -> float:
    """Mean output tokens/s the spec's tenants ask for."""
    return sum(tenant_rate(t) * t.output_len.expected_len() for t in spec.tenants)


def at_load(spec: WorkloadSpec, saturation: Saturation, load: float) -> WorkloadSpec:
    """``spec`` with every rate scaled (mix kept) to offer ``load`` x the saturation
    output throughput."""
    if load <= 0:
        raise ValueError(f"load must be > 0, got {load}")
    target = load * saturation.output_tokens_per_s
    return scale_rates(spec, target / offered_output_tokens_per_s(spec))


def outputs_and_backlog(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step of a run's steps frame: the output tokens made so far (all tenants), and
    whether any tenant had a request waiting."""
    outputs = steps[[c for c in steps.columns if c.startswith(OUTPUT_PREFIX)]].sum(axis=1)
    queued = steps[[c for c in steps.columns if c.startswith(BACKLOG_PREFIX)]].any(axis=1)
    return outputs.to_numpy(float), queued.to_numpy(bool)


def backlogged_throughput(steps: pd.DataFrame) -> float:
    """Output tokens per second over the steps that ran while some tenant had a request
    waiting (the batch kept full): each such step's tokens over the time to the next
    step's start. The engine's own clock, so the same in process and over HTTP; a step
    with no successor has no duration and is left out. ValueError when no timed step was
    backlogged (the workload never overloaded the engine)."""
    outputs, queued = outputs_and_backlog(steps)
    made = np.diff(outputs, prepend=0.0)[:-1]
    took = np.diff(steps["start_s"].to_numpy(float))
    full = queued[:-1]
    if not full.any():
        raise ValueError(
            f"no timed step of {len(steps)} ran with a request waiting: the workload did "
            "not overload the engine"
        )
    return ratio(float(made[full].sum()), float(took[full].sum()))


@dataclass(frozen=True)
class Phase:
    """A stretch of a trial's timeline: it lasts the time the engine needs to serve
    ``service_requests`` requests of the mix at saturation, with arrivals at ``load``."""

    service_requests: float
    load: float

    def __post_init__(self) -> None:
        if not (self.service_requests > 0 and self.load > 0):
            raise ValueError(f"a phase needs service_requests > 0 and load > 0, got {self}")


def phased_requests(
    spec: WorkloadSpec, saturation: Saturation, phases: Sequence[Phase], vocab_size: int
) -> list[WorkloadRequest]:
    """``spec``'s request stream (rates scaled to saturation) with its arrival times warped
    so that each phase offers exactly its own load: the same requests in the same order
    whatever the phases, only their spacing changes.

    A phase of wall length D at load L offers D x L x saturation output tokens, whatever
    the draw: the stream is drawn at load 1 and cut where its cumulative output tokens
    (``max_tokens``) reach each phase's work, the request straddling a cut going to the side
    holding more of its tokens, and each phase's stretch of the stream (from the cut before
    it to the first arrival after it) is compressed or stretched to D. A poisson stream
    conditioned on the work it brings: its gaps keep their shape, but a draw that happens
    to bring 20% less work cannot make a trial run 20% under its load. Requests past the
    last phase are dropped.
    """
    if not phases:
        raise ValueError("phased_requests needs at least one phase")
    walls = [saturation.seconds_for(p.service_requests) for p in phases]
    cuts = np.cumsum(
        [w * p.load * saturation.output_tokens_per_s for w, p in zip(walls, phases, strict=True)]
    )
    stream = _stream_with_work(spec, saturation, float(cuts[-1]), vocab_size)
    tokens = np.array([r.max_tokens for r in stream], dtype=float)
    # A request's phase: the first cut its token midpoint falls below (len(phases): dropped).
    midpoints = np.cumsum(tokens) - tokens / 2.0
    phase_of = np.searchsorted(cuts, midpoints, side="right")
    arrivals = np.array([r.arrival_s for r in stream], dtype=float)
    starts_t = np.concatenate([[0.0], np.cumsum(walls)])
    out: list[WorkloadRequest] = []
    span_start = 0.0
    for k, wall in enumerate(walls):
        inside = np.flatnonzero(phase_of == k)
        after = np.flatnonzero(phase_of > k)
        span_end = arrivals[after[0]] if len(after) else arrivals[-1]
        span = max(span_end - span_start, 1e-12)
        for i in inside:
            t = starts_t[k] + (arrivals[i] - span_start) / span * wall
            out.append(dataclasses.replace(stream[i], arrival_s=float(t), request_index=len(out)))
        span_start = span_end
    return out


def _stream_with_work(
    spec: WorkloadSpec, saturation: Saturation, work_tokens: float, vocab_size: int
) -> list[WorkloadRequest]:
    """``spec``'s stream at load 1, long enough that its output tokens pass ``work_tokens``
    with a request to spare (a longer draw only appends arrivals, so the prefix is the same
    whatever the length)."""
    unit = at_load(spec, saturation, 1.0)
    duration_s = 1.5 * work_tokens / saturation.output_tokens_per_s + 10.0 / max(
        offered_requests_per_s(unit), 1e-12
    )
    for _ in range(8):
        stream = workload_requests(
            dataclasses.replace(unit, max_duration_s=duration_s, max_requests=None), vocab_size
        )
        if sum(r.max_tokens for r in stream) > work_tokens + max(
            (r.max_tokens for r in stream), default=0
        ):
            return stream
        duration_s *= 2.0
    raise ValueError(
        f"the stream of {spec.tenants!r} did not bring {work_tokens:.0f} output tokens in "
        f"{duration_s:.3g} s"
    )


def safety_timeout_s(expected_s: float) -> float:
    """A deadline for a run meant to finish: SAFETY_FACTOR x its expected length."""
    return max(SAFETY_FACTOR * expected_s, SAFETY_FLOOR_S)


@dataclass(frozen=True)
class Arm:
    """One mode of a trial: the requests it serves and the host-side config changes
    (config.HOST_FIELDS: policies, tenants) it makes to the baseline engine config."""

    requests: list[WorkloadRequest]
    changes: dict[str, Any] = field(default_factory=dict)


def serve_arms(
    ctx: RunContext,
    engine: LLMEngine,
    baseline: EngineConfig,
    arms: Mapping[str, Arm],
    trial: int,
    *,
    timeout_s: float,
    via: str = "engine",
) -> dict[str, ServedRun]:
    """The tenant-experiment loop body: serve every arm on the same engine, in an order
    rotated by ``trial``, each from an emptied engine under ``baseline`` with only its own
    changes, and save its frames under ``mode=<arm>, trial=<trial>``.

    Arms start from ``baseline`` (not from the previous arm's config), so two arms differ in
    exactly the changes they name. ``via`` is ``serve``'s: in process or over HTTP.
    """
    served = {}
    for mode in rotated(list(arms), trial):
        arm = arms[mode]
        engine.reset(dataclasses.replace(baseline, **arm.changes))
        served[mode] = serve(engine, arm.requests, timeout_s, via)
        ctx.save_frames(
            requests=served[mode].requests, steps=served[mode].steps, mode=mode, trial=trial
        )
    return served


def trial_seed(ctx: RunContext, trial: int) -> int:
    """The workload seed of ``trial``: distinct per trial, shared by the trial's arms."""
    return ctx.seed * 1000 + trial + 1


def serve(
    engine: LLMEngine, requests: list[WorkloadRequest], timeout_s: float, via: str = "engine"
) -> ServedRun:
    """Serve ``requests`` at their arrival offsets; frames hold only this run's records.

    ``via``: "engine" replays them on the engine in process; "http" sends them through the
    OpenAI-compatible server wrapped around it (lab/load/http_serving.py), one API key per
    tenant, and the requests frame is what the HTTP clients saw."""
    if via == "http":
        from claimbench.lab.load.http_serving import serve_http_frames

        frames = serve_http_frames(engine, requests, timeout_s, SERVE_SAMPLING)
        return ServedRun(*frames)
    if via != "engine":
        raise ValueError(f"via must be 'engine' or 'http', got {via!r}")
    first_step = len(engine.step_records)
    result = replay(engine, requests, timeout_s, sampling=SERVE_SAMPLING)
    frame = engine.requests_frame()
    frame = frame[frame["request_id"].isin(result.request_ids)].reset_index(drop=True)
    steps = engine.steps_frame().iloc[first_step:].reset_index(drop=True)
    return ServedRun(frame, steps, result.duration_s, result.timed_out)


def percentile(values: pd.Series | np.ndarray, q: float) -> float:
    """The q-th percentile of the finite values (NaN if none)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")


def tenant_percentiles(requests: pd.DataFrame, values: pd.Series, q: float) -> dict[str, float]:
    """The q-th percentile of ``values`` (aligned with ``requests``) per tenant."""
    return {t: percentile(values.loc[g.index], q) for t, g in requests.groupby("tenant", sort=True)}


def observed_ttft_s(requests: pd.DataFrame) -> pd.Series:
    """TTFT of every admitted request, censored at the run's end for those still waiting.

    A request that got its first token counts its TTFT even if the run then timed out; one
    aborted at the timeout before its first token counts the time it had waited (a lower
    bound on its TTFT), so a run cut short never hides its slowest requests. Rejected
    requests are left out (NaN).
    """
    first = requests["first_token_s"] - requests["arrival_s"]
    censored = requests["finish_s"] - requests["arrival_s"]
    ttft = first.where(first.notna(), censored)
    return ttft.where(requests["finish_reason"] != "rejected")


def observed_wait_s(requests: pd.DataFrame) -> pd.Series:
    """Seconds from arrival to first scheduled, censored like ``observed_ttft_s``."""
    wait = requests["first_scheduled_s"] - requests["arrival_s"]
    censored = requests["finish_s"] - requests["arrival_s"]
    wait = wait.where(wait.notna(), censored)
    return wait.where(requests["finish_reason"] != "rejected")


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; ValueError when the denominator is not a positive number."""
    if not denominator > 0:
        raise ValueError(f"cannot form a ratio over {denominator!r} (numerator {numerator!r})")
    return numerator / denominator
