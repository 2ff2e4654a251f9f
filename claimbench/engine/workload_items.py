"""Workload items for ``LLMEngine.run``: what to send, and when."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from claimbench.engine.sampler import SamplingParams


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
