"""Replaying a workload on an engine in process: what to send and when, and the wall-clock
driver that adds each request at its arrival and steps the engine until all finish.

Only the engine's public surface is used (add_request, step, abort, has_unfinished), so the
engine never needs to know about workloads.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import Event, RunResult
from claimbench.engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class WorkItem:
    arrival_offset_s: float  # seconds after the run starts
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams
    tenant: str = "default"
    priority: int = 0


def as_work_items(workload: Iterable[object], sampling: SamplingParams | None) -> list[WorkItem]:
    """Normalise tuples and workload requests (objects with ``arrival_s``, ``max_tokens``,
    ...) into WorkItems; the latter take ``sampling`` with their own max_tokens."""
    base = sampling or SamplingParams()
    items = []
    for x in workload:
        if isinstance(x, WorkItem):
            items.append(x)
        elif isinstance(x, tuple):
            offset, token_ids, params, tenant, priority = x
            items.append(WorkItem(float(offset), tuple(token_ids), params, tenant, priority))
        elif hasattr(x, "arrival_s") and hasattr(x, "max_tokens"):
            params = dataclasses.replace(base, max_tokens=int(x.max_tokens))
            items.append(
                WorkItem(
                    float(x.arrival_s), tuple(x.prompt_token_ids), params, x.tenant, x.priority
                )
            )
        else:
            raise ValueError(f"unsupported workload item {x!r}")
    return items


def benchmark_items(
    prompts: list[list[int]],
    output_len: int,
    rate: float,
    burstiness: float,
    seed: int,
) -> list[WorkItem]:
    """A vLLM-style serving benchmark: the prompts at Poisson (burstiness 1) or gamma
    arrivals of ``rate`` requests/s (inf = all at once), each generating exactly
    ``output_len`` greedy tokens."""
    import numpy as np

    from claimbench.workload.arrivals import arrival_times

    if rate == float("inf"):
        times = np.zeros(len(prompts))
    else:
        kind = "poisson" if burstiness == 1.0 else "gamma"
        rng = np.random.default_rng(seed)
        times = arrival_times(kind, rate, rng, burstiness=burstiness, num_requests=len(prompts))
    params = SamplingParams(max_tokens=output_len, ignore_eos=True)
    return [WorkItem(float(t), tuple(p), params) for t, p in zip(times, prompts, strict=True)]


def run_workload(
    engine: LLMEngine,
    items: list[WorkItem],
    timeout_s: float,
    on_step: Callable[[list[Event]], None] | None = None,
) -> RunResult:
    """Add each item when the wall clock reaches its arrival and step until all finish;
    what is unfinished at ``timeout_s`` is aborted with reason "timeout"."""
    items = sorted(items, key=lambda w: w.arrival_offset_s)
    start = time.perf_counter()
    ids: list[str] = []
    next_item = 0
    timed_out = False
    while next_item < len(items) or engine.has_unfinished:
        now = time.perf_counter()
        while next_item < len(items) and start + items[next_item].arrival_offset_s <= now:
            w = items[next_item]
            arrival = start + w.arrival_offset_s  # the scheduled time, as vLLM's client sends
            ids.append(
                engine.add_request(w.prompt_token_ids, w.sampling, w.tenant, w.priority, arrival)
            )
            next_item += 1
        if now - start > timeout_s:
            timed_out = True
            for request_id in ids:
                engine.abort(request_id, "timeout")  # a no-op for finished requests
            break
        if engine.has_unfinished:
            events = engine.step()
        else:
            gap = start + items[next_item].arrival_offset_s - now
            time.sleep(max(min(gap, start + timeout_s - now), 0.0))
            events = engine.step()  # reports rejections made while idle
        if on_step is not None:
            on_step(events)
    return RunResult(ids, time.perf_counter() - start, timed_out)


def replay(
    engine: LLMEngine,
    workload: Iterable[WorkItem | object],
    timeout_s: float = 600.0,
    *,
    sampling: SamplingParams | None = None,
    on_step: Callable[[list[Event]], None] | None = None,
) -> RunResult:
    """Inject each item at its arrival offset (wall clock) and step until all finish.

    Items are WorkItems, (arrival_offset_s, prompt_token_ids, SamplingParams, tenant,
    priority) tuples or workload requests (``arrival_s``, ``prompt_token_ids``,
    ``max_tokens``, ``tenant``, ``priority``), served with ``sampling`` and their own
    max_tokens. Requests still unfinished at ``timeout_s`` are aborted with reason "timeout".
    """
    return run_workload(engine, as_work_items(workload, sampling), timeout_s, on_step)
