"""Shared steps of the multi-tenant experiments: saturation, load levels, serving, percentiles.

Load levels are fractions of a saturation throughput measured on the running hardware, so
"90% load" means the same thing on a laptop CPU and on a TPU: a closed-loop burst of the
experiment's own request mix (every request submitted at once) is served to completion and
its output tokens per second is the saturation point. A workload is then scaled so that its
offered output tokens per second is the wanted fraction of that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.fairness import BACKLOG_PREFIX, OUTPUT_PREFIX
from claimbench.engine.kv_cache import pool_bytes, resolve_kv_dtype
from claimbench.engine.sampler import SamplingParams
from claimbench.models.checkpoint import read_config
from claimbench.workload.build import WorkloadRequest, build_requests
from claimbench.workload.lengths import UniformLength
from claimbench.workload.spec import WorkloadSpec, scale_rates, tenant_rate
from claimbench.workload.tenants import TenantLoad
from claimbench.workload.tokens import random_token_source

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

# Outputs run to max_tokens: lengths are the workload's, not the model's whim.
SERVE_SAMPLING = SamplingParams(ignore_eos=True)
COMPILE_CACHE_DIR = Path.home() / ".cache" / "claimbench" / "xla"


@dataclass(frozen=True)
class Saturation:
    """The engine's full-batch throughput on one request mix."""

    output_tokens_per_s: float
    requests_per_s: float  # output_tokens_per_s / the mix's mean output tokens
    num_requests: int  # in the burst


@dataclass(frozen=True)
class ServedRun:
    """One workload served by one engine: its own requests' and steps' records."""

    requests: pd.DataFrame  # metrics.requests_frame rows of this run's requests
    steps: pd.DataFrame  # metrics.steps_frame rows of this run's steps
    duration_s: float
    timed_out: bool


def experiment_engine(ctx: RunContext, params: dict[str, Any], **overrides: Any) -> LLMEngine:
    """The run's engine with the experiment's ``engine`` params and ``overrides``, every
    bucket compiled before anything is timed.

    Compiled steps go to a persistent cache (``params["compile_cache"]``, default on), so
    the next experiment in a new process loads them instead of compiling again.
    """
    options = dict(params.get("engine", {})) | overrides
    if params.get("compile_cache", True):
        options.setdefault("compilation_cache_dir", COMPILE_CACHE_DIR)
    engine = ctx.engine(**options)
    engine.precompile()
    return engine


def kv_pool_bytes(ctx: RunContext, engine_params: dict[str, Any], num_usable_pages: int) -> int:
    """kv_pool_bytes that holds exactly ``num_usable_pages`` pages (plus the null page) of
    the run's model under the engine params' dtype, kv_dtype and page_size."""
    model_cfg = read_config(ctx.model_path)
    storage = resolve_kv_dtype(
        engine_params.get("kv_dtype", "auto"), engine_params.get("dtype", ctx.dtype)
    )
    return pool_bytes(model_cfg, storage, engine_params.get("page_size", 16), num_usable_pages + 1)


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


def measure_saturation(engine: LLMEngine, spec: WorkloadSpec, num_requests: int) -> Saturation:
    """Submit the first ``num_requests`` requests of ``spec`` all at once and measure the
    output throughput while requests are still waiting, i.e. while the batch is kept full.

    The ramp-down after the queue empties (a shrinking batch) is left out: it is the burst's
    artefact, not the engine's capacity. ``num_requests`` should be several times
    ``max_num_seqs`` so the full-batch window spans many steps.
    """
    burst = dataclasses.replace(spec, max_requests=num_requests, max_duration_s=None)
    requests = [
        dataclasses.replace(r, arrival_s=0.0)
        for r in workload_requests(burst, engine.model_cfg.vocab_size)
    ]
    steps = serve(engine, requests, timeout_s=3600.0).steps
    outputs = steps[[c for c in steps.columns if c.startswith(OUTPUT_PREFIX)]].sum(axis=1)
    queued = steps[[c for c in steps.columns if c.startswith(BACKLOG_PREFIX)]].any(axis=1)
    # Steps 0..last queued step ran full; the next step's start ends the window.
    last = int(np.flatnonzero(queued.to_numpy())[-1]) if queued.any() else -1
    if last < 1 or last + 1 >= len(steps):
        raise ValueError(
            f"a burst of {num_requests} requests kept the queue busy for {last + 1} of "
            f"{len(steps)} steps; saturation needs more requests than max_num_seqs"
        )
    span_s = float(steps["start_s"].iloc[last + 1] - steps["start_s"].iloc[0])
    tokens = float(outputs.iloc[last])  # made by steps 0..last
    mean_output = float(np.mean([r.max_tokens for r in requests]))
    return Saturation(
        output_tokens_per_s=tokens / span_s,
        requests_per_s=tokens / span_s / mean_output,
        num_requests=num_requests,
    )


def serve(engine: LLMEngine, requests: list[WorkloadRequest], timeout_s: float) -> ServedRun:
    """Serve ``requests`` at their arrival offsets; frames hold only this run's records."""
    first_step = len(engine.step_records)
    result = engine.run(requests, timeout_s, sampling=SERVE_SAMPLING)
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
