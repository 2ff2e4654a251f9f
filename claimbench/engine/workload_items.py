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
