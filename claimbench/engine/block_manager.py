"""Page allocator: per-request block tables over a fixed pool of KV pages.

Page 0 is the null page (padding writes there) and is never handed out. Pages carry
reference counts so that full pages can later be shared between requests (prefix
caching); a page returns to the free list when its last reference goes. Pages are
also counted per tenant, for quotas and fair-share accounting.
"""

from __future__ import annotations

from collections import Counter, deque

from claimbench.engine.request import Request
from claimbench.kernels.metadata import NULL_PAGE


class BlockManager:
    def __init__(self, num_pages: int, page_size: int) -> None:
        """num_pages counts the null page, so num_pages - 1 are usable."""
        if num_pages < 2:
            raise ValueError(f"a KV pool needs >= 2 pages (one is the null page), got {num_pages}")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.ref_counts = [0] * num_pages
        self.free_pages: deque[int] = deque(p for p in range(num_pages) if p != NULL_PAGE)
        self.tenant_pages: Counter[str] = Counter()  # page references held per tenant

    @property
    def num_usable_pages(self) -> int:
        return self.num_pages - 1

    @property
    def num_free_pages(self) -> int:
        return len(self.free_pages)

    @property
    def num_used_pages(self) -> int:
        return self.num_usable_pages - len(self.free_pages)

    def num_pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def num_new_pages(self, request: Request, num_new_tokens: int) -> int:
        """Pages to add so the request can hold its computed tokens plus num_new_tokens."""
        needed = self.num_pages_for(request.num_computed_tokens + num_new_tokens)
        return max(needed - len(request.block_table), 0)

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        return self.num_new_pages(request, num_new_tokens) <= len(self.free_pages)

    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Grow the request's block table to cover num_new_tokens more tokens."""
        num_new = self.num_new_pages(request, num_new_tokens)
        if num_new > len(self.free_pages):
            raise ValueError(
                f"request {request.request_id} needs {num_new} pages, {len(self.free_pages)} free"
            )
        for _ in range(num_new):
            page = self.free_pages.popleft()
            self.ref_counts[page] = 1
            request.block_table.append(page)
        self.tenant_pages[request.tenant] += num_new

    def free(self, request: Request) -> None:
        """Drop the request's references; pages no one references go back to the pool."""
        # Last page first, so a later prefix cache evicts a sequence's tail before its head.
        for page in reversed(request.block_table):
            self.ref_counts[page] -= 1
            if self.ref_counts[page] == 0:
                self.free_pages.append(page)
        self.tenant_pages[request.tenant] -= len(request.block_table)
        if self.tenant_pages[request.tenant] == 0:
            del self.tenant_pages[request.tenant]
        request.block_table = []
