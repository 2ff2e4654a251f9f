"""Page allocator: per-request block tables over a fixed pool of KV pages.

Page 0 is the null page (padding writes there) and is never handed out. Pages carry
reference counts (prefix_cache.BlockPool) so that full pages can be shared between
requests (prefix caching); a page returns to the free queue when its last reference
goes, and a cached one stays reusable there until evicted. Pages are also counted per
tenant, for quotas and fair-share accounting.

With prefix caching on, a request admitted with an empty block table starts from its
longest cached prefix (``match_prefix``), and its full blocks are entered into the cache
as their KV is computed: on its next allocation, or when it is freed.
"""

from __future__ import annotations

from collections import Counter

from claimbench.engine.kv.prefix_cache import BlockChain, BlockPool, CachedBlock, cache_salt
from claimbench.engine.request import Request


class BlockManager:
    def __init__(self, num_pages: int, page_size: int, prefix_caching: str = "off") -> None:
        """num_pages counts the null page, so num_pages - 1 are usable. ``prefix_caching``
        is one of config.PREFIX_MODES."""
        cache_salt(prefix_caching, "", None)  # validates the mode
        self.pool = BlockPool(num_pages, page_size)
        self.num_pages = num_pages
        self.page_size = page_size
        self.prefix_caching = prefix_caching
        self.chains: dict[str, BlockChain] = {}  # by request id, from first lookup to free
        self.tenant_pages: Counter[str] = Counter()  # page references held per tenant

    @property
    def num_usable_pages(self) -> int:
        return self.num_pages - 1

    @property
    def num_free_pages(self) -> int:
        """Pages an allocation may take: unused, or cached but held by no request."""
        return self.pool.num_free_pages

    @property
    def num_used_pages(self) -> int:
        return self.num_usable_pages - self.pool.num_free_pages

    def num_pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def num_new_pages(self, request: Request, num_new_tokens: int) -> int:
        """Pages to add so the request can hold its computed tokens plus num_new_tokens."""
        needed = self.num_pages_for(request.num_computed_tokens + num_new_tokens)
        return max(needed - len(request.block_table), 0)

    def match_prefix(self, request: Request) -> int:
        """Leading tokens of a request about to be admitted (empty block table) whose KV is
        cached: where its computation starts once allocated. Always < its token count."""
        return len(self._hits(request)) * self.page_size

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Whether ``allocate(request, num_new_tokens)`` would succeed."""
        needed = self.num_new_pages(request, num_new_tokens) + self.pool.num_revived(
            self._hits(request)
        )
        return needed <= self.pool.num_free_pages

    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Grow the request's block table to cover num_new_tokens more tokens.

        A request with an empty block table first takes its cached prefix by reference
        (num_computed_tokens jumps to ``match_prefix``); num_new_tokens count from there.
        """
        hits = self._hits(request)
        num_new = self.num_new_pages(request, num_new_tokens)
        # Cached hit pages no request holds leave the free queue too.
        needed = num_new + self.pool.num_revived(hits)
        if needed > self.pool.num_free_pages:
            raise ValueError(
                f"request {request.request_id} needs {needed} pages, "
                f"{self.pool.num_free_pages} free"
            )
        if not request.block_table:
            request.block_table = (
                self.pool.acquire(self.chains[request.request_id], hits) if hits else []
            )
            request.num_computed_tokens = len(hits) * self.page_size
            if request.num_preemptions == 0:
                request.prefix_hit_tokens = request.num_computed_tokens
        self._cache_computed(request)
        last = request.block_table[-1] if request.block_table else None
        request.block_table += self.pool.allocate(num_new, after=last)
        self.tenant_pages[request.tenant] += len(hits) + num_new

    def trim(self, request: Request, num_tokens: int) -> int:
        """Release the tail pages beyond the first ``num_tokens`` tokens (the draft slots a
        verification rejected); returns how many. Those pages hold unverified K/V, never a
        cached block: only computed full blocks are entered into the prefix cache."""
        keep = self.num_pages_for(num_tokens)
        surplus = request.block_table[keep:]
        if not surplus:
            return 0
        self.pool.release(surplus[::-1])
        self.tenant_pages[request.tenant] -= len(surplus)
        request.block_table = request.block_table[:keep]
        return len(surplus)

    def free(self, request: Request) -> None:
        """Drop the request's references; pages no one references go back to the pool, cached
        full blocks staying reusable until their page is taken again."""
        self._cache_computed(request)
        # Last page first: a sequence's tail is evicted before its head, likelier to be shared.
        self.pool.release(request.block_table[::-1])
        self.chains.pop(request.request_id, None)
        self.tenant_pages[request.tenant] -= len(request.block_table)
        if self.tenant_pages[request.tenant] == 0:
            del self.tenant_pages[request.tenant]
        request.block_table = []

    def _hits(self, request: Request) -> list[CachedBlock]:
        if self.prefix_caching == "off" or request.block_table:
            return []
        chain = self.chains.get(request.request_id)
        if chain is None:
            salt = cache_salt(self.prefix_caching, request.tenant, request.cache_salt)
            chain = self.chains[request.request_id] = BlockChain(salt)
        if request.sampling.prompt_logprobs:
            return []  # it needs every prompt position's logits; its blocks are still cached
        return self.pool.match(chain, request.token_ids(0, request.num_tokens))

    def _cache_computed(self, request: Request) -> None:
        """Enter the request's full blocks whose KV is computed; only they are never rewritten."""
        chain = self.chains.get(request.request_id)
        num_full = min(request.num_computed_tokens // self.page_size, len(request.block_table))
        if chain is None or chain.broken or num_full <= len(chain.serials):
            return
        num_tokens = num_full * self.page_size
        tokens = request.token_ids(0, num_tokens)
        self.pool.cache_full_blocks(chain, tokens, request.block_table, num_tokens)
