"""Tenants: who a request belongs to, and what that tenant is promised and allowed.

A Tenant carries a fair-share weight, a priority tier (lower number = higher priority;
0 is the top tier), latency objectives, ingress limits and a KV quota. Requests of a
tenant the engine was not configured with get ``Tenant(id)``'s defaults: weight 1,
tier 0, no limits, no guaranteed pages and the whole shared burst region.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from claimbench.workload.validation import check_int, check_name, check_positive


@dataclass(frozen=True)
class Tenant:
    """One tenant's configuration; every limit is None (= unlimited) by default."""

    id: str
    weight: float = 1.0  # fair-share weight (wvtc, fair-share victims)
    priority: int = 0  # tier; lower = higher priority. Caps how high its requests may rank
    ttft_slo_s: float | None = None  # time-to-first-token objective
    tpot_slo_s: float | None = None  # time-per-output-token objective
    max_queued_requests: int | None = None  # waiting requests at most (ingress)
    max_queued_tokens: int | None = None  # prompt + max_tokens of waiting requests at most
    token_rate: float | None = None  # admitted prompt + max_tokens per second (token bucket)
    token_burst: float | None = None  # bucket size; None = one second of token_rate
    guaranteed_pages: int = 0  # KV pages reserved for this tenant alone
    burst_pages: int | None = None  # pages it may take from the shared region; None = any

    def __post_init__(self) -> None:
        check_name("Tenant", "id", self.id)
        owner = f"Tenant({self.id!r})"
        object.__setattr__(self, "weight", check_positive(owner, "weight", self.weight))
        object.__setattr__(self, "priority", check_int(owner, "priority", self.priority))
        for name in ("ttft_slo_s", "tpot_slo_s", "token_rate", "token_burst"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive(owner, name, getattr(self, name)))
        for name in ("max_queued_requests", "max_queued_tokens"):
            if getattr(self, name) is not None:
                object.__setattr__(
                    self, name, check_int(owner, name, getattr(self, name), minimum=1)
                )
        if self.token_burst is not None and self.token_rate is None:
            raise ValueError(f"{owner}.token_burst={self.token_burst} needs a token_rate")
        object.__setattr__(
            self,
            "guaranteed_pages",
            check_int(owner, "guaranteed_pages", self.guaranteed_pages, minimum=0),
        )
        if self.burst_pages is not None:
            value = check_int(owner, "burst_pages", self.burst_pages, minimum=0)
            object.__setattr__(self, "burst_pages", value)

    @property
    def bucket_size(self) -> float:
        """Tokens the rate limiter holds when full (inf without a token_rate)."""
        if self.token_rate is None:
            return math.inf
        return self.token_burst if self.token_burst is not None else self.token_rate

    @property
    def has_kv_quota(self) -> bool:
        """Whether this tenant changes page allocation at all."""
        return self.guaranteed_pages > 0 or self.burst_pages is not None

    def tier_for(self, requested: int) -> int:
        """The tier a request asking for ``requested`` gets: never above the tenant's own."""
        return max(requested, self.priority)


class TenantTable:
    """The configured tenants by id; an unknown id gets a default Tenant."""

    def __init__(self, tenants: Iterable[Tenant] = ()) -> None:
        self.configured: dict[str, Tenant] = {}
        for tenant in tenants:
            if not isinstance(tenant, Tenant):
                raise ValueError(f"tenants must be Tenant objects, got {tenant!r}")
            if tenant.id in self.configured:
                raise ValueError(f"tenant {tenant.id!r} is configured twice")
            self.configured[tenant.id] = tenant
        self._defaults: dict[str, Tenant] = {}

    def get(self, tenant_id: str) -> Tenant:
        if tenant_id in self.configured:
            return self.configured[tenant_id]
        if tenant_id not in self._defaults:
            self._defaults[tenant_id] = Tenant(tenant_id)
        return self._defaults[tenant_id]

    def weight(self, tenant_id: str) -> float:
        return self.get(tenant_id).weight

    @property
    def total_guaranteed_pages(self) -> int:
        return sum(t.guaranteed_pages for t in self.configured.values())

    @property
    def has_kv_quotas(self) -> bool:
        return any(t.has_kv_quota for t in self.configured.values())
