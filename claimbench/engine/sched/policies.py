"""Scheduling policies: the order requests get tokens and the preemption victim, by name.

An ordering lists requests most deserving first; the scheduler serves running requests
and then admits waiting ones in that order, telling the ordering about each arrival
(``on_arrival``) and each request's service as it is scheduled (``charge``), so stateful
orderings (vtc, wvtc) can steer the next pick. Priorities are tiers: lower number =
higher priority, 0 is the top tier.

    fcfs            arrival time
    priority        strict tiers, arrival time within a tier (can starve low tiers)
    priority-aging  tiers that age: one tier per ``aging_s`` seconds of waiting
    vtc, wvtc       virtual token counter, unweighted or divided by tenant weight (vtc.py)

A victim policy picks, among the running requests not yet scheduled this step, the one to
preempt when pages run out: ``newest`` (vLLM's), ``lowest-priority`` (then newest),
``fair-share`` (the tenant furthest above its weighted share of the KV pool, then its
request with the fewest computed tokens, i.e. the least work to recompute), or
``tier-fair-share`` (fair-share among the candidates below the top tier; a top-tier request
only when every candidate is top tier).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from claimbench.engine.config import PolicyParams
from claimbench.engine.config_tenants import TenantTable
from claimbench.engine.sched.vtc import VtcOrdering

if TYPE_CHECKING:
    from claimbench.engine.request import Request

TOP_TIER = 0  # the highest priority tier (config_tenants.Tenant.priority)


class Ordering(Protocol):
    name: str

    def order(self, requests: Sequence[Request], now: float) -> Iterable[Request]: ...

    def on_arrival(self, request: Request, waiting: Sequence[Request]) -> None: ...

    def charge(self, request: Request, num_input_tokens: int, num_output_tokens: int) -> None: ...


@dataclass(frozen=True)
class SortedOrdering:
    """An ordering by a fixed per-request key; it keeps no state."""

    name: str
    key: Callable[[Request], tuple]

    def order(self, requests: Sequence[Request], now: float) -> list[Request]:
        return sorted(requests, key=self.key)

    def on_arrival(self, request: Request, waiting: Sequence[Request]) -> None:
        """Nothing to update: the key depends on the request alone."""

    def charge(self, request: Request, num_input_tokens: int, num_output_tokens: int) -> None:
        """Nothing to update: service does not move the key."""


def fcfs_ordering(params: PolicyParams) -> SortedOrdering:
    """First come, first served: by arrival time, ties by submission order."""
    return SortedOrdering("fcfs", lambda r: (r.arrival_time, r.seq_no))


def priority_ordering(params: PolicyParams) -> SortedOrdering:
    """Strict tiers: any waiting top-tier request goes before every lower-tier one."""
    return SortedOrdering("priority", lambda r: (r.priority, r.arrival_time, r.seq_no))


def aging_ordering(params: PolicyParams) -> SortedOrdering:
    """Tiers with aging: at time t a request ranks at priority - (t - arrival) / aging_s.

    Sorting by that at any fixed t is sorting by arrival + priority * aging_s, a virtual
    deadline: a tier-p request outranks every request of tier q < p that arrives more than
    (p - q) * aging_s after it, so waiting never starves it. That horizon is the bound.
    """
    aging_s = params.aging_s
    return SortedOrdering(
        "priority-aging", lambda r: (r.arrival_time + r.priority * aging_s, r.seq_no)
    )


def vtc_ordering(params: PolicyParams) -> VtcOrdering:
    return VtcOrdering("vtc", input_weight=params.input_weight, output_weight=params.output_weight)


def wvtc_ordering(params: PolicyParams) -> VtcOrdering:
    return VtcOrdering(
        "wvtc",
        input_weight=params.input_weight,
        output_weight=params.output_weight,
        tenant_weight=params.tenants.weight,
    )


@dataclass(frozen=True)
class PoolView:
    """What a victim policy may read about the KV pool."""

    tenant_pages: Mapping[str, int]  # pages held per tenant
    num_usable_pages: int
    tenants: TenantTable


def newest_victim(candidates: Sequence[Request], pool: PoolView) -> Request:
    """The most recently arrived request: it has waited least and lost least work."""
    _check_candidates(candidates)
    return max(candidates, key=lambda r: (r.arrival_time, r.seq_no))


def lowest_priority_victim(candidates: Sequence[Request], pool: PoolView) -> Request:
    """The lowest tier (largest priority number); the newest within it."""
    _check_candidates(candidates)
    return max(candidates, key=lambda r: (r.priority, r.arrival_time, r.seq_no))


def fair_share_victim(candidates: Sequence[Request], pool: PoolView) -> Request:
    """From the tenant holding the most pages beyond its weighted share of the pool, the
    request with the fewest computed tokens (ties: newest).

    Shares split the usable pages by weight among the tenants that hold pages or have a
    candidate, so a tenant's share grows when others go idle.
    """
    _check_candidates(candidates)
    active = set(pool.tenant_pages) | {r.tenant for r in candidates}
    total_weight = sum(pool.tenants.weight(t) for t in active)

    def excess(tenant: str) -> float:
        share = pool.num_usable_pages * pool.tenants.weight(tenant) / total_weight
        return pool.tenant_pages.get(tenant, 0) - share

    tenant = max({r.tenant for r in candidates}, key=lambda t: (excess(t), t))
    own = [r for r in candidates if r.tenant == tenant]
    return min(own, key=lambda r: (r.num_computed_tokens, -r.arrival_time, -r.seq_no))


def tier_fair_share_victim(candidates: Sequence[Request], pool: PoolView) -> Request:
    """``fair_share_victim`` over the candidates below the top tier: a top-tier request is
    preempted only when no lower-tier candidate is left.

    Fair shares still count every tenant holding pages, top tier included, so a lower-tier
    tenant's excess is measured against the whole pool, not against the lower tiers alone.
    """
    _check_candidates(candidates)
    lower = [r for r in candidates if r.priority > TOP_TIER]
    return fair_share_victim(lower or candidates, pool)


def _check_candidates(candidates: Sequence[Request]) -> None:
    if not candidates:
        raise ValueError("no preemption candidates")


VictimPolicy = Callable[[Sequence["Request"], PoolView], "Request"]

ORDERINGS: dict[str, Callable[[PolicyParams], Ordering]] = {
    "fcfs": fcfs_ordering,
    "priority": priority_ordering,
    "priority-aging": aging_ordering,
    "vtc": vtc_ordering,
    "wvtc": wvtc_ordering,
}
VICTIMS: dict[str, VictimPolicy] = {
    "newest": newest_victim,
    "lowest-priority": lowest_priority_victim,
    "fair-share": fair_share_victim,
    "tier-fair-share": tier_fair_share_victim,
}


def make_ordering(name: str, params: PolicyParams | None = None) -> Ordering:
    """A fresh ordering object (orderings may keep per-tenant state)."""
    if name not in ORDERINGS:
        raise ValueError(f"unknown scheduling_policy {name!r}; expected one of {tuple(ORDERINGS)}")
    return ORDERINGS[name](params if params is not None else PolicyParams())


def get_victim_policy(name: str) -> VictimPolicy:
    if name not in VICTIMS:
        raise ValueError(f"unknown victim_policy {name!r}; expected one of {tuple(VICTIMS)}")
    return VICTIMS[name]
