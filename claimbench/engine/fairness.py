"""Per-tenant service over time, and the service gap between backlogged tenants.

The scheduler charges every scheduled chunk to the request's tenant as input tokens
(prompt tokens, and outputs recomputed after a preemption) and output tokens (the one
token a step samples once a request is caught up). The ledger keeps running totals and
one snapshot per engine step, so the gap between tenants can be measured and plotted.

The gap is the fairness measure of Sheng et al. (OSDI 2024): for two tenants f and g,
the largest |W_f(t1, t2) - W_g(t1, t2)| over intervals [t1, t2) in which both are
backlogged (have waiting requests), where W is service w_in * input + w_out * output,
divided by the tenant's weight. Within one stretch of joint backlog that is the range
(max - min) of the running difference of their cumulative services.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from claimbench.engine.request import Request

INPUT_PREFIX, OUTPUT_PREFIX, BACKLOG_PREFIX = "input_tokens.", "output_tokens.", "backlogged."
RUNNING_TOKENS = "running_tokens"


def service_tokens(request: Request, num_tokens: int) -> tuple[int, int]:
    """(input, output) tokens that scheduling ``num_tokens`` more of ``request`` serves.

    Called before the step advances ``num_computed_tokens``. The token whose forward pass
    samples the next output counts as that output; every other computed token is input.
    """
    start = request.num_computed_tokens
    end = start + num_tokens
    if not 0 < num_tokens <= request.num_uncomputed_tokens:
        raise ValueError(
            f"request {request.request_id}: cannot schedule {num_tokens} tokens with "
            f"{request.num_uncomputed_tokens} uncomputed"
        )
    samples = end == request.num_tokens
    # A fresh prompt's last token is input too: the first output is not yet in the sequence.
    input_end = max(request.num_prompt_tokens, request.num_tokens - 1)
    num_input = max(min(end, input_end) - start, 0)
    return num_input, int(samples)


@dataclass(frozen=True)
class StepService:
    """Cumulative service per tenant after one engine step."""

    input_tokens: dict[str, int]
    output_tokens: dict[str, int]
    backlogged: frozenset[str]  # tenants with waiting requests when the step was scheduled
    running_tokens: int  # tokens of context held by the running batch after scheduling


class ServiceLedger:
    """Running per-tenant totals of input and output tokens served (and of tokens lost to
    preemption), with per-step history."""

    def __init__(self) -> None:
        self.input_tokens: dict[str, int] = {}
        self.output_tokens: dict[str, int] = {}
        self.preempted_tokens: dict[str, int] = {}  # computed tokens lost to preemption
        self.history: list[StepService] = []

    def charge(self, tenant: str, num_input_tokens: int, num_output_tokens: int) -> None:
        self.input_tokens[tenant] = self.input_tokens.get(tenant, 0) + num_input_tokens
        self.output_tokens[tenant] = self.output_tokens.get(tenant, 0) + num_output_tokens

    def record_preemption(self, request: Request) -> None:
        """Count the computed tokens a preemption throws away (they will be computed again)."""
        tenant = request.tenant
        self.preempted_tokens[tenant] = (
            self.preempted_tokens.get(tenant, 0) + request.num_computed_tokens
        )

    def record_step(self, backlogged: Iterable[str], running_tokens: int) -> None:
        """Snapshot the totals: call once per engine step, after its charges."""
        self.history.append(
            StepService(
                dict(self.input_tokens),
                dict(self.output_tokens),
                frozenset(backlogged),
                running_tokens,
            )
        )

    def columns(self) -> pd.DataFrame:
        """One row per recorded step: ``input_tokens.<tenant>``, ``output_tokens.<tenant>``,
        ``backlogged.<tenant>`` for every tenant seen, and ``running_tokens``."""
        tenants = sorted({t for s in self.history for t in (*s.input_tokens, *s.backlogged)})
        data: dict[str, list] = {RUNNING_TOKENS: [s.running_tokens for s in self.history]}
        for t in tenants:
            data[INPUT_PREFIX + t] = [s.input_tokens.get(t, 0) for s in self.history]
            data[OUTPUT_PREFIX + t] = [s.output_tokens.get(t, 0) for s in self.history]
            data[BACKLOG_PREFIX + t] = [t in s.backlogged for s in self.history]
        return pd.DataFrame(data, index=pd.RangeIndex(len(self.history)))


def frame_tenants(steps: pd.DataFrame) -> list[str]:
    """The tenants a steps frame carries service columns for."""
    return sorted(c[len(INPUT_PREFIX) :] for c in steps.columns if c.startswith(INPUT_PREFIX))


def cumulative_service(
    steps: pd.DataFrame,
    *,
    input_weight: float,
    output_weight: float,
    tenant_weight: Callable[[str], float] | None = None,
) -> pd.DataFrame:
    """f64[num_steps, num_tenants]: w_in * input + w_out * output so far, per tenant column,
    divided by the tenant's weight when ``tenant_weight`` is given."""
    out = {}
    for t in frame_tenants(steps):
        service = input_weight * steps[INPUT_PREFIX + t].to_numpy(float) + output_weight * steps[
            OUTPUT_PREFIX + t
        ].to_numpy(float)
        out[t] = service / (tenant_weight(t) if tenant_weight is not None else 1.0)
    return pd.DataFrame(out, index=steps.index)


def max_service_gap(service: pd.DataFrame, backlogged: Mapping[str, np.ndarray]) -> float:
    """The largest service gap between two tenants over intervals in which both were
    backlogged (0 when no two tenants ever were at once).

    ``service`` is ``cumulative_service``'s frame; ``backlogged[t]`` is b[num_steps], whether
    tenant t had waiting requests when step i was scheduled. Step i's service is the increase
    from row i - 1 to row i.
    """
    tenants = list(service.columns)
    increments = service.diff().fillna(service).to_numpy(float)  # f64[num_steps, num_tenants]
    gap = 0.0
    for i, f in enumerate(tenants):
        for j in range(i + 1, len(tenants)):
            g = tenants[j]
            both = np.asarray(backlogged[f], bool) & np.asarray(backlogged[g], bool)
            delta = increments[:, i] - increments[:, j]
            gap = max(gap, _largest_range_within_runs(delta, both))
    return gap


def _largest_range_within_runs(delta: np.ndarray, mask: np.ndarray) -> float:
    """max over runs of consecutive True in ``mask`` of (max - min) of the running sum of
    ``delta`` over the run, the sum starting from 0 before the run's first step."""
    best = 0.0
    running = lo = hi = 0.0
    for d, inside in zip(delta, mask, strict=True):
        if not inside:
            running = lo = hi = 0.0
            continue
        running += d
        lo, hi = min(lo, running), max(hi, running)
        best = max(best, hi - lo)
    return best


def steps_backlog(steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """b[num_steps] per tenant: whether it was backlogged at each step."""
    return {t: steps[BACKLOG_PREFIX + t].to_numpy(bool) for t in frame_tenants(steps)}
