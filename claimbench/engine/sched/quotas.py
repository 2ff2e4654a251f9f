"""Per-tenant KV quotas: guaranteed pages plus a shared burst region.

The usable pool splits into each configured tenant's guaranteed pages, which no other
tenant may take, and the shared burst region (everything else). A tenant's pages count
against its guarantee first; pages beyond it come from the burst region, at most
``burst_pages`` of them when the tenant sets a cap. Because guarantees are reserved, a
tenant below its guarantee always finds its pages free: the accounting never admits an
allocation the physical pool cannot hold.

Page counts are the block manager's references per tenant (``tenant_pages``); nothing is
cached here, so the quota view can never drift from the allocator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from claimbench.engine.config_tenants import TenantTable

if TYPE_CHECKING:
    from claimbench.engine.kv.block_manager import BlockManager
    from claimbench.engine.request import Request


class KVQuotas:
    def __init__(self, tenants: TenantTable, num_usable_pages: int) -> None:
        guaranteed = tenants.total_guaranteed_pages
        if guaranteed > num_usable_pages:
            raise ValueError(
                f"tenants' guaranteed_pages add up to {guaranteed}, more than the "
                f"{num_usable_pages} usable pages of the KV pool"
            )
        self.tenants = tenants
        self.num_usable_pages = num_usable_pages
        self.num_burst_pages = num_usable_pages - guaranteed  # the shared region

    def guaranteed(self, tenant: str) -> int:
        return self.tenants.get(tenant).guaranteed_pages

    def over_guarantee(self, tenant: str, tenant_pages: Mapping[str, int]) -> int:
        """Burst pages the tenant holds: its pages beyond its guarantee."""
        return max(tenant_pages.get(tenant, 0) - self.guaranteed(tenant), 0)

    def num_free_burst_pages(self, tenant_pages: Mapping[str, int]) -> int:
        used = sum(self.over_guarantee(t, tenant_pages) for t in tenant_pages)
        return self.num_burst_pages - used

    def headroom(self, tenant: str, tenant_pages: Mapping[str, int]) -> int:
        """Pages ``tenant`` may still take: unused guarantee plus the burst it may reach."""
        used = tenant_pages.get(tenant, 0)
        unused_guarantee = max(self.guaranteed(tenant) - used, 0)
        burst = self.num_free_burst_pages(tenant_pages)
        cap = self.tenants.get(tenant).burst_pages
        if cap is not None:
            burst = min(burst, cap - self.over_guarantee(tenant, tenant_pages))
        return unused_guarantee + max(burst, 0)

    def can_take(self, tenant: str, num_pages: int, tenant_pages: Mapping[str, int]) -> bool:
        return num_pages <= self.headroom(tenant, tenant_pages)

    def fits(self, block_manager: BlockManager, request: Request, num_new_tokens: int) -> bool:
        """Whether the pages ``block_manager.allocate(request, num_new_tokens)`` would add to
        the request's tenant are within its headroom."""
        num_pages = block_manager.num_new_pages(request, num_new_tokens)
        if not request.block_table:
            # A fresh request also takes its cached prefix's pages, by reference.
            num_pages += block_manager.match_prefix(request) // block_manager.page_size
        return self.can_take(request.tenant, num_pages, block_manager.tenant_pages)

    def max_pages(self, tenant: str) -> int:
        """The most pages the tenant can ever hold (with the rest of the pool idle)."""
        cap = self.tenants.get(tenant).burst_pages
        burst = self.num_burst_pages if cap is None else min(cap, self.num_burst_pages)
        return self.guaranteed(tenant) + burst

    def victim_candidates(
        self, tenant: str, candidates: Sequence[Request], tenant_pages: Mapping[str, int]
    ) -> list[Request]:
        """The candidates whose preemption can make room for ``tenant``.

        A tenant at its own burst cap gains pages only by giving up its own; otherwise
        burst pages are what is short, and only tenants over their guarantee hold them.
        """
        cap = self.tenants.get(tenant).burst_pages
        if cap is not None and self.over_guarantee(tenant, tenant_pages) >= cap:
            return [r for r in candidates if r.tenant == tenant]
        return [r for r in candidates if self.over_guarantee(r.tenant, tenant_pages) > 0]
