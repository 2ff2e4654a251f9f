"""Turn a WorkloadSpec into the concrete, time-ordered requests of one run.

Randomness: every tenant draws from its own generators, seeded from (spec.seed, tenant
index, stream), one stream each for arrivals, prompt lengths, output lengths, prompt
tokens and the system prompt. Separate streams mean that changing one knob (a rate, an
output-length distribution, a bound) leaves every other draw unchanged, so runs at
different loads serve the same requests at different times.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from claimbench.workload.arrivals import arrival_times
from claimbench.workload.spec import WorkloadSpec
from claimbench.workload.tokens import TokenSource
from claimbench.workload.trace import load_trace, tenant_rows, trace_rate

_TENANT_STREAMS = ("arrivals", "prompt_len", "output_len", "tokens", "system_prompt")
# First spawn-key entry: keeps per-tenant and per-group seeds from ever coinciding.
_TENANT_KEY, _GROUP_KEY = 0, 1


@dataclass(frozen=True)
class WorkloadRequest:
    """One request of a run, ready for ``LLMEngine.add_request``."""

    arrival_s: float  # seconds after the run starts
    tenant: str
    priority: int
    prompt_token_ids: tuple[int, ...]  # system prompt (if any) then the request's own tokens
    max_tokens: int
    request_index: int  # position in the run's arrival order, 0..num_requests-1

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(frozen=True)
class _Schedule:
    """One tenant's requests before tokens: index k is its k-th arrival."""

    arrival_s: np.ndarray  # f64[n] non-decreasing
    prompt_len: np.ndarray  # i64[n] tokens after the system prompt
    output_len: np.ndarray  # i64[n]


def build_requests(spec: WorkloadSpec, token_source: TokenSource) -> list[WorkloadRequest]:
    """The requests of ``spec`` sorted by arrival time (ties: tenant order, then per-tenant
    order), with prompt tokens from ``token_source``. The same spec and source always give
    identical requests."""
    traces: dict[str, pd.DataFrame] = {}
    schedules = [_schedule(spec, i, traces) for i in range(len(spec.tenants))]
    arrival = np.concatenate([s.arrival_s for s in schedules])
    tenant_index = np.concatenate(
        [np.full(len(s.arrival_s), i, dtype=np.int64) for i, s in enumerate(schedules)]
    )
    nth = np.concatenate([np.arange(len(s.arrival_s)) for s in schedules])
    order = np.lexsort((nth, tenant_index, arrival))[: spec.max_requests]

    # A tenant's kept requests are its first m arrivals, so tokens are drawn in its own
    # arrival order whatever the other tenants did.
    kept = np.bincount(tenant_index[order], minlength=len(spec.tenants))
    prompts = []
    for i, (load, schedule) in enumerate(zip(spec.tenants, schedules, strict=True)):
        system_prompt = _system_prompt(spec, i, token_source)
        rng = _tenant_rng(spec.seed, i, "tokens")
        prompts.append(
            [
                system_prompt + _draw_tokens(token_source, rng, int(length), load.tenant)
                for length in schedule.prompt_len[: kept[i]]
            ]
        )

    return [
        WorkloadRequest(
            arrival_s=float(arrival[j]),
            tenant=spec.tenants[tenant_index[j]].tenant,
            priority=spec.tenants[tenant_index[j]].priority,
            prompt_token_ids=prompts[tenant_index[j]][nth[j]],
            max_tokens=int(schedules[tenant_index[j]].output_len[nth[j]]),
            request_index=position,
        )
        for position, j in enumerate(order)
    ]


def _schedule(spec: WorkloadSpec, index: int, traces: dict[str, pd.DataFrame]) -> _Schedule:
    load = spec.tenants[index]
    num_requests = _tightest(load.num_requests, spec.max_requests)
    duration_s = _tightest(load.duration_s, spec.max_duration_s)
    if load.is_trace:
        if load.trace_path not in traces:
            traces[load.trace_path] = load_trace(load.trace_path)
        rows = tenant_rows(traces[load.trace_path], load.tenant, load.trace_path)
        times = rows["timestamp"].to_numpy()
        if load.rate is not None:
            times = times * (trace_rate(rows, load.trace_path) / load.rate)
        keep = len(times) if duration_s is None else int(np.searchsorted(times, duration_s))
        if num_requests is not None:
            keep = min(keep, num_requests)
        return _Schedule(
            arrival_s=times[:keep],
            prompt_len=rows["prompt_len"].to_numpy()[:keep],
            output_len=rows["output_len"].to_numpy()[:keep],
        )
    times = arrival_times(
        load.arrival,
        load.rate,
        _tenant_rng(spec.seed, index, "arrivals"),
        burstiness=load.burstiness,
        num_requests=num_requests,
        duration_s=duration_s,
    )
    return _Schedule(
        arrival_s=times,
        prompt_len=load.prompt_len.sample(_tenant_rng(spec.seed, index, "prompt_len"), len(times)),
        output_len=load.output_len.sample(_tenant_rng(spec.seed, index, "output_len"), len(times)),
    )


def _system_prompt(spec: WorkloadSpec, index: int, token_source: TokenSource) -> tuple[int, ...]:
    load = spec.tenants[index]
    if load.system_prompt_len == 0:
        return ()
    if load.system_prompt_group is None:
        rng = _tenant_rng(spec.seed, index, "system_prompt")
        return _draw_tokens(token_source, rng, load.system_prompt_len, load.tenant)
    # Every member draws the group's longest prompt from the group's own seed and keeps its
    # prefix, so members agree on the shared tokens without consulting one another.
    group_len = max(
        other.system_prompt_len
        for other in spec.tenants
        if other.system_prompt_group == load.system_prompt_group
    )
    group_key = zlib.crc32(load.system_prompt_group.encode())
    rng = np.random.default_rng(
        np.random.SeedSequence(spec.seed, spawn_key=(_GROUP_KEY, group_key))
    )
    shared = _draw_tokens(token_source, rng, group_len, load.tenant)
    return shared[: load.system_prompt_len]


def _draw_tokens(
    token_source: TokenSource, rng: np.random.Generator, length: int, tenant: str
) -> tuple[int, ...]:
    ids = np.asarray(token_source(rng, length))
    if ids.shape != (length,) or (length and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(
            f"token source gave dtype {ids.dtype} shape {ids.shape} for tenant {tenant!r}, "
            f"expected {length} integer ids"
        )
    return tuple(ids.tolist())


def _tightest(own: float | None, overall: float | None) -> float | None:
    bounds = [b for b in (own, overall) if b is not None]
    return min(bounds) if bounds else None


def _tenant_rng(seed: int, index: int, stream: str) -> np.random.Generator:
    key = (_TENANT_KEY, index, _TENANT_STREAMS.index(stream))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))
