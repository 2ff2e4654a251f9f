"""The virtual token counter (Sheng et al., OSDI 2024, "Fairness in Serving Large Language
Models"): serve the backlogged tenant that has received the least service so far.

Each tenant has a counter of the service it was given: ``w_in`` per input token computed
plus ``w_out`` per output token generated (defaults 1 and 2: a decode token costs about
twice a prefill token), divided by the tenant's weight in the weighted variant. Admission
and budget go to the tenant with the smallest counter, one request at a time, so a
charge made while a step is being scheduled already counts for the next pick.

A tenant that was not backlogged (no waiting request) must not bank credit for the time it
was idle: when it becomes backlogged again its counter is lifted to the smallest counter
among the tenants that are backlogged, or, when none is, to the counter of the tenant
served last (the paper's ``l``). This is what keeps the service gap between any two
backlogged tenants within 2 * max(w_in * L_in, w_out * M) (L_in: longest input, M: most
tokens in one running batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from claimbench.engine.config import DEFAULT_INPUT_WEIGHT, DEFAULT_OUTPUT_WEIGHT

if TYPE_CHECKING:
    from claimbench.engine.request import Request


class VtcOrdering:
    """Least-counter-first across tenants, first come first served within one."""

    def __init__(
        self,
        name: str = "vtc",
        *,
        input_weight: float = DEFAULT_INPUT_WEIGHT,
        output_weight: float = DEFAULT_OUTPUT_WEIGHT,
        tenant_weight: Callable[[str], float] | None = None,
    ) -> None:
        if input_weight < 0 or output_weight < 0 or input_weight + output_weight == 0:
            raise ValueError(
                f"VTC weights must be >= 0 and not both 0, got w_in={input_weight} "
                f"w_out={output_weight}"
            )
        self.name = name
        self.input_weight = input_weight
        self.output_weight = output_weight
        self.tenant_weight = tenant_weight  # None = every tenant weighs 1 (plain VTC)
        self.counters: dict[str, float] = {}
        self.last_served_counter = 0.0

    def counter(self, tenant: str) -> float:
        return self.counters.get(tenant, 0.0)

    def on_arrival(self, request: Request, waiting: Sequence[Request]) -> None:
        """Lift the tenant's counter if ``request`` makes it backlogged again.

        Called before ``request`` joins ``waiting`` (the current waiting queue).
        """
        backlogged = {r.tenant for r in waiting}
        if request.tenant in backlogged:
            return
        others = [self.counter(t) for t in backlogged]
        floor = min(others) if others else self.last_served_counter
        self.counters[request.tenant] = max(self.counter(request.tenant), floor)

    def charge(self, request: Request, num_input_tokens: int, num_output_tokens: int) -> None:
        """Add the service ``request`` gets this step to its tenant's counter."""
        service = self.input_weight * num_input_tokens + self.output_weight * num_output_tokens
        if self.tenant_weight is not None:
            service /= self.tenant_weight(request.tenant)
        counter = self.counter(request.tenant) + service
        self.counters[request.tenant] = counter
        self.last_served_counter = counter

    def order(self, requests: Sequence[Request], now: float) -> Iterator[Request]:
        """``requests`` one at a time, each from the tenant with the least counter at that
        moment (ties: the tenant whose next request arrived first).

        Lazy on purpose: the scheduler charges each admitted request before it asks for
        the next, so one pick's charge steers the following picks.
        """
        queues: dict[str, list[Request]] = {}
        for request in sorted(requests, key=lambda r: (r.arrival_time, r.seq_no), reverse=True):
            queues.setdefault(request.tenant, []).append(request)  # earliest last: pop()
        while queues:
            tenant = min(
                queues,
                key=lambda t: (self.counter(t), queues[t][-1].arrival_time, queues[t][-1].seq_no),
            )
            request = queues[tenant].pop()
            if not queues[tenant]:
                del queues[tenant]
            yield request
