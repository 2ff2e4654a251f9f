"""Scheduling policies: the waiting-queue order and the preemption victim, chosen by name.

An ordering sorts requests, most deserving first; the scheduler admits in that order.
A victim policy picks, among the running requests not yet scheduled this step, the one
to preempt when pages run out. Both see only host-side request state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from claimbench.engine.request import Request


class FcfsOrdering:
    """First come, first served: by arrival time, ties by submission order."""

    name = "fcfs"

    def order(self, requests: Sequence[Request], now: float) -> list[Request]:
        return sorted(requests, key=lambda r: (r.arrival_time, r.seq_no))


def newest_victim(candidates: Sequence[Request]) -> Request:
    """The most recently arrived request: it has waited least and lost least work."""
    if not candidates:
        raise ValueError("no preemption candidates")
    return max(candidates, key=lambda r: (r.arrival_time, r.seq_no))


ORDERINGS: dict[str, Callable[[], FcfsOrdering]] = {"fcfs": FcfsOrdering}
VICTIMS: dict[str, Callable[[Sequence[Request]], Request]] = {"newest": newest_victim}


def make_ordering(name: str) -> FcfsOrdering:
    """A fresh ordering object (orderings may keep per-tenant state)."""
    if name not in ORDERINGS:
        raise ValueError(f"unknown scheduling_policy {name!r}; expected one of {tuple(ORDERINGS)}")
    return ORDERINGS[name]()


def get_victim_policy(name: str) -> Callable[[Sequence[Request]], Request]:
    if name not in VICTIMS:
        raise ValueError(f"unknown victim_policy {name!r}; expected one of {tuple(VICTIMS)}")
    return VICTIMS[name]
