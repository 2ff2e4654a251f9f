"""Ingress admission: per-tenant limits checked when a request is added.

A request over its tenant's limits is rejected on the spot, with a reason naming the
limit and the numbers, and counted per (tenant, limit). Rejected work never joins the
queue, so it never takes KV pages or step budget. The limits (engine/config_tenants.py):

    max_queued_requests  the tenant's waiting requests, this one included
    max_queued_tokens    prompt + max_tokens of its waiting requests, this one included
    token_rate           a token bucket refilled at token_rate per second up to
                         token_burst; admitting a request spends prompt + max_tokens

A request's cost is prompt + max_tokens, the work it may ask for. The bucket runs on the
requests' arrival times, so a replayed workload is limited by its own timeline, not by
when the host got round to adding it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from claimbench.engine.config_tenants import Tenant, TenantTable

if TYPE_CHECKING:
    from claimbench.engine.request import Request

LIMITS = ("max_queued_requests", "max_queued_tokens", "token_rate")
# A degradation-ladder rung shedding the request's tier (engine/sched/ladder.py): not a tenant
# limit, but like one it turns a request away for now, so it is counted beside them.
LADDER_SHED = "ladder_shed"


class TokenBucket:
    """Tokens refill at ``rate`` per second up to ``size``; starts full."""

    def __init__(self, rate: float, size: float, now: float) -> None:
        self.rate = rate
        self.size = size
        self.level = size
        self.time = now

    def level_at(self, now: float) -> float:
        """Level at ``now``, leaving the bucket as it is (earlier ``now`` refills nothing)."""
        if now > self.time:
            return min(self.size, self.level + (now - self.time) * self.rate)
        return self.level

    def refill(self, now: float) -> float:
        """Level at ``now``, kept (time never runs backwards: earlier ``now`` refills nothing)."""
        if now > self.time:
            self.level = self.level_at(now)
            self.time = now
        return self.level

    def spend(self, tokens: float) -> None:
        self.level -= tokens


class AdmissionControl:
    """Checks each new request against its tenant's ingress limits."""

    def __init__(self, tenants: TenantTable) -> None:
        self.tenants = tenants
        self.buckets: dict[str, TokenBucket] = {}
        self.num_rejected: Counter[tuple[str, str]] = Counter()  # (tenant, limit) -> count
        self.num_admitted: Counter[str] = Counter()

    def admit(self, request: Request, waiting: Sequence[Request]) -> str | None:
        """None if ``request`` may join the queue (its tokens are then spent), else why not.

        ``waiting`` is the current waiting queue, without ``request``.
        """
        tenant = self.tenants.get(request.tenant)
        over = self._over_limit(tenant, request, waiting)
        if over is not None:
            limit, reason = over
            self.num_rejected[(tenant.id, limit)] += 1
            return reason
        if tenant.token_rate is not None:
            self.buckets[tenant.id].spend(request.max_total_tokens)
        self.num_admitted[tenant.id] += 1
        return None

    def never_admits(self, request: Request) -> str | None:
        """Why ``request``'s tenant limits would refuse it even with nothing else queued and
        a full bucket (its cost exceeds max_queued_tokens or the bucket's size), else None.
        No retry can pass, so the engine refuses it as invalid, not over a limit for now:
        a client told to retry would be refused forever. Reads the limits only."""
        tenant = self.tenants.get(request.tenant)
        cost = request.max_total_tokens
        if tenant.max_queued_tokens is not None and cost > tenant.max_queued_tokens:
            return (
                f"prompt + max_tokens = {cost} tokens can never fit tenant {tenant.id!r}'s "
                f"max_queued_tokens={tenant.max_queued_tokens}"
            )
        if cost > tenant.bucket_size:
            return (
                f"prompt + max_tokens = {cost} tokens can never fit tenant {tenant.id!r}'s "
                f"token bucket of {tenant.bucket_size:g} tokens (token_burst)"
            )
        return None

    def record_shed(self, tenant_id: str) -> None:
        """Count a request the degradation ladder shed at ingress, beside the limits'."""
        self.num_rejected[(tenant_id, LADDER_SHED)] += 1

    def _over_limit(
        self, tenant: Tenant, request: Request, waiting: Sequence[Request]
    ) -> tuple[str, str] | None:
        """(limit, reason) for the first limit ``request`` breaks, or None."""
        queued = [r for r in waiting if r.tenant == tenant.id]
        cost = request.max_total_tokens
        if tenant.max_queued_requests is not None and len(queued) + 1 > tenant.max_queued_requests:
            return "max_queued_requests", (
                f"tenant {tenant.id!r} already has {len(queued)} queued requests "
                f"(max_queued_requests={tenant.max_queued_requests})"
            )
        queued_tokens = sum(r.max_total_tokens for r in queued)
        if tenant.max_queued_tokens is not None and queued_tokens + cost > tenant.max_queued_tokens:
            return "max_queued_tokens", (
                f"tenant {tenant.id!r} has {queued_tokens} queued tokens; {cost} more exceed "
                f"max_queued_tokens={tenant.max_queued_tokens}"
            )
        if tenant.token_rate is not None:
            bucket = self.buckets.get(tenant.id)
            if bucket is None:
                bucket = TokenBucket(tenant.token_rate, tenant.bucket_size, request.arrival_time)
                self.buckets[tenant.id] = bucket
            level = bucket.refill(request.arrival_time)
            if cost > level:
                return "token_rate", (
                    f"tenant {tenant.id!r} has {level:.0f} of {cost} tokens in its bucket "
                    f"(token_rate={tenant.token_rate:g}/s, token_burst={tenant.bucket_size:g})"
                )
        return None

    def retry_after_s(self, request: Request) -> float | None:
        """Seconds until ``request``'s tenant bucket holds its tokens again; None when no
        token bucket refused it or no wait would make it fit (it exceeds the bucket). Only
        reads the bucket: asking changes no later admission."""
        tenant = self.tenants.get(request.tenant)
        bucket = self.buckets.get(tenant.id)
        cost = request.max_total_tokens
        if tenant.token_rate is None or bucket is None or cost > bucket.size:
            return None
        level = bucket.level_at(request.arrival_time)
        return max(0.0, (cost - level) / bucket.rate)

    @property
    def total_rejected(self) -> int:
        return sum(self.num_rejected.values())
