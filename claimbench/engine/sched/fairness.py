"""Per-tenant service over time: the ledger the scheduler charges.

The scheduler charges every scheduled chunk to the request's tenant as input tokens
(prompt tokens, and outputs recomputed after a preemption) and output tokens (the token
a step samples once a request is caught up, and the draft tokens a verification accepts).
The ledger keeps running totals and one snapshot per engine step, so the gap between
tenants can be measured and plotted (lab/metrics/service.py holds that analysis; the engine
only records).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

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

    def charge_accepted(self, tenant: str, num_output_tokens: int) -> None:
        """Charge output tokens known only after the step ran (accepted draft tokens), into
        the totals and into that step's snapshot, already recorded at scheduling."""
        self.charge(tenant, 0, num_output_tokens)
        if self.history:
            outputs = self.history[-1].output_tokens
            outputs[tenant] = outputs.get(tenant, 0) + num_output_tokens

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
