"""A fixed-step driver: arrivals given as engine-step indices, outcomes counted in steps.

``serving.clients.replay`` injects requests on the wall clock, so what a request meets depends on
how fast the host steps. Here time is the step count: before step k every request whose
arrival step is <= k is added, then the engine takes one step. Nothing waits on the
clock, so for policies that do not read it (fcfs, vtc, quotas, queue limits) the same
arrivals give the same schedule on any machine, which is what a test of a mechanism needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from claimbench.engine.outputs import FinishEvent, RejectEvent, TokenEvent
from claimbench.lab.load.tenant_runs import SERVE_SAMPLING
from claimbench.workload.build import WorkloadRequest

if TYPE_CHECKING:
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.engine import LLMEngine


@dataclass(frozen=True)
class SteppedRun:
    """One served run in step units."""

    # One row per request: request_id, tenant, arrival_step, first_token_step (NaN if it
    # never got one), finish_step, finish_reason ("rejected" for turned-away requests).
    requests: pd.DataFrame
    steps: pd.DataFrame  # the engine's steps frame for this run (service columns beside)
    num_steps: int  # driver steps taken, idle ones included

    @property
    def ttft_steps(self) -> pd.Series:
        """Steps from arrival to first token of every admitted request (NaN if rejected)."""
        return self.requests["first_token_step"] - self.requests["arrival_step"]


def serve_by_step(
    engine: LLMEngine,
    arrivals: Sequence[tuple[int, WorkloadRequest]],
    *,
    max_steps: int,
    config: EngineConfig | None = None,
) -> SteppedRun:
    """Serve ``(arrival_step, request)`` pairs on the emptied ``engine`` (under ``config``,
    host-side fields only, if given) to completion.

    Requests are added in the given order within one step. ValueError if anything is
    still unfinished after ``max_steps`` steps (a stalled scheduler must not pass a test).
    """
    if any(step < 0 for step, _ in arrivals):
        raise ValueError("arrival steps must be >= 0")
    engine.reset(config)
    pending = sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    rows: dict[str, dict] = {}
    step = 0
    while pending or engine.has_unfinished:
        if step >= max_steps:
            raise ValueError(f"{len(pending)} arrivals pending, work unfinished after {step}")
        while pending and arrivals[pending[0]][0] <= step:
            arrival_step, r = arrivals[pending.pop(0)]
            request_id = engine.add_request(
                list(r.prompt_token_ids),
                dataclasses.replace(SERVE_SAMPLING, max_tokens=int(r.max_tokens)),
                tenant=r.tenant,
                priority=r.priority,
            )
            rows[request_id] = {
                "request_id": request_id,
                "tenant": r.tenant,
                "arrival_step": arrival_step,
                "first_token_step": np.nan,
                "finish_step": np.nan,
                "finish_reason": None,
            }
        for event in engine.step():
            row = rows[event.request_id]
            if isinstance(event, TokenEvent) and event.index == 0:
                row["first_token_step"] = step
            elif isinstance(event, RejectEvent):
                row["finish_step"], row["finish_reason"] = step, "rejected"
            elif isinstance(event, FinishEvent):
                row["finish_step"], row["finish_reason"] = step, event.reason
        step += 1
    return SteppedRun(pd.DataFrame(list(rows.values())), engine.steps_frame(), step)
