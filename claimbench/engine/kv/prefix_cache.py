"""Prefix caching: full KV pages named by a hash chain, shared by reference count.

A full block (page_size tokens) is named by hash(parent block's hash, its token ids, extra
keys). The first block's extra keys carry the cache salt and the chain carries it on, so two
requests share a block only when they share the salt and every token up to the block's end.
The salt is a security boundary, not only a performance knob: whoever can observe a hit (a
faster time to first token) learns that someone with the same salt sent that prefix.

The pool owns every page's reference count and one free queue. A released page joins the
queue's tail and keeps its cache entry; allocation takes pages from the head and evicts their
entries, so cached pages no request holds are reused least recently released first (the free
queue of vLLM v1's BlockPool). A hit on such a page takes it back out of the queue. Uncached
free pages hold nothing, so allocation picks among them to keep a sequence's pages adjacent.

A hash never decides a hit alone: each cached block stores its token ids, its extra keys and
the serial number of its parent cached block, and a lookup compares all three. A collision can
therefore only cost a miss, never hand out another prefix's KV. Serials are never reused, so a
block whose parent was evicted can no longer be reached; it waits in the queue until evicted.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from claimbench.engine.config import PREFIX_MODES
from claimbench.kernels.metadata import NULL_PAGE

BlockHash = bytes
HashFn = Callable[[BlockHash | None, Sequence[int], tuple], BlockHash]
# Parent of every first block: fixed, so hashes are stable across processes and runs.
ROOT_HASH: BlockHash = hashlib.sha256(b"claimbench prefix cache root").digest()


def hash_block_tokens(
    parent: BlockHash | None, token_ids: Sequence[int], extra_keys: tuple = ()
) -> BlockHash:
    """sha256 of (parent hash or ROOT_HASH, token ids as int64, repr(extra_keys)): 32 bytes.

    Within one engine every block has page_size tokens, so the parts never run together.
    """
    digest = hashlib.sha256(ROOT_HASH if parent is None else parent)
    digest.update(array("q", token_ids).tobytes())
    digest.update(repr(extra_keys).encode())
    return digest.digest()


def cache_salt(mode: str, tenant: str, request_salt: str | None) -> str | None:
    """The salt mixed into a request's first block under ``mode`` (one of PREFIX_MODES).

    per-tenant: the tenant id, so tenants never share; shared: none, every tenant shares;
    salted: the request's own ``cache_salt`` (requests without one share with each other).
    """
    if mode not in PREFIX_MODES:
        raise ValueError(f"prefix caching mode {mode!r} is not one of {PREFIX_MODES}")
    if mode == "per-tenant":
        return tenant
    if mode == "salted":
        return request_salt
    return None


@dataclass(frozen=True)
class CachedBlock:
    """One cached full block: where its KV lives and exactly what it holds."""

    block_hash: BlockHash
    page: int
    serial: int  # unique for the pool's lifetime; children name their parent by it
    parent_serial: int | None  # None for a first block
    token_ids: tuple[int, ...]  # [page_size]
    extra_keys: tuple  # (salt,) on a salted first block, else ()


@dataclass
class BlockChain:
    """One request's full blocks as the cache sees them, from its first allocation to its free."""

    salt: str | None
    hashes: list[BlockHash] = field(default_factory=list)  # block i's hash, computed lazily
    serials: list[int] = field(default_factory=list)  # serial of the cached block i resolved to
    # A collision kept block len(serials) out of the cache; its successors cannot be named.
    broken: bool = False

    def extra_keys(self, index: int) -> tuple:
        return (self.salt,) if index == 0 and self.salt is not None else ()


class BlockPool:
    """The KV pages of one engine: reference counts, the LRU free queue and the prefix cache.

    Page NULL_PAGE is never handed out. ``hash_fn`` is replaceable so tests can force collisions.
    """

    def __init__(
        self, num_pages: int, page_size: int, *, hash_fn: HashFn = hash_block_tokens
    ) -> None:
        if num_pages < 2:
            raise ValueError(f"a KV pool needs >= 2 pages (one is the null page), got {num_pages}")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.hash_fn = hash_fn
        self.ref_counts = [0] * num_pages
        # Pages no request holds, least recently released first; cached ones keep their entry.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(
            p for p in range(num_pages) if p != NULL_PAGE
        )
        self._by_hash: dict[BlockHash, CachedBlock] = {}
        self._by_page: dict[int, CachedBlock] = {}
        self._next_serial = 0
        self.num_evictions = 0  # cached blocks dropped because their page was reused

    @property
    def num_free_pages(self) -> int:
        """Pages an allocation may take: never used, or cached but held by no request."""
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._by_page)

    def is_cached(self, page: int) -> bool:
        return page in self._by_page

    def free_queue(self) -> list[int]:
        """The free pages in the order allocation takes them."""
        return list(self._free)

    # -- references -----------------------------------------------------------------------

    def allocate(self, num_pages: int, after: int | None = None) -> list[int]:
        """Take num_pages free pages for a block table that ends with page ``after`` (None for
        an empty one), evicting the cache entries of cached ones.

        Cached pages leave least recently released first (the queue's head). An uncached
        free page holds nothing, so which of those is taken is the allocator's choice: it
        keeps a sequence's pages adjacent and ascending where it can, which the decode
        kernel reads faster than scattered pages (docs/performance/kernel_threads.md). The
        page after the table's last when that one is free and uncached; otherwise the head,
        or, when the head is uncached, the lowest page of the run of free uncached pages
        that ends at the head, no further down than the pages still needed. Released pages
        join the queue last page first, so a finished sequence's pages come back as such a
        descending run and the next sequence takes them ascending."""
        if num_pages > len(self._free):
            raise ValueError(f"need {num_pages} pages, {len(self._free)} free")
        pages: list[int] = []
        for taken in range(num_pages):
            page = self._next_page(after, num_pages - taken)
            del self._free[page]
            self._evict(page)
            self.ref_counts[page] = 1
            pages.append(page)
            after = page
        return pages

    def _next_page(self, after: int | None, wanted: int) -> int:
        if after is not None and self._is_blank(after + 1):
            return after + 1
        page = next(iter(self._free))
        if page in self._by_page:
            return page
        start = page
        while page - start + 1 < wanted and self._is_blank(start - 1):
            start -= 1
        return start

    def _is_blank(self, page: int) -> bool:
        """Free and holding no cached block (a page past the pool is neither)."""
        return page in self._free and page not in self._by_page

    def share(self, pages: Sequence[int]) -> None:
        """Take one more reference on each (cached) page; a free one leaves the queue."""
        for page in pages:
            if self.ref_counts[page] == 0:
                del self._free[page]
            self.ref_counts[page] += 1

    def release(self, pages: Sequence[int]) -> None:
        """Drop one reference on each page; unreferenced pages join the free queue's tail in
        the order given, so the first of them is evicted first."""
        for page in pages:
            if self.ref_counts[page] <= 0:
                raise ValueError(
                    f"page {page} released with reference count {self.ref_counts[page]}"
                )
            self.ref_counts[page] -= 1
            if self.ref_counts[page] == 0:
                self._free[page] = None

    def num_revived(self, hits: Sequence[CachedBlock]) -> int:
        """How many hit pages sit in the free queue: sharing them shrinks num_free_pages."""
        return sum(1 for block in hits if self.ref_counts[block.page] == 0)

    # -- caching --------------------------------------------------------------------------

    def match(self, chain: BlockChain, token_ids: Sequence[int]) -> list[CachedBlock]:
        """The cached blocks holding the longest prefix of token_ids (i[num_tokens]) under the
        chain's salt, leaving at least the last token to compute so its logits exist.

        Reads the cache only; ``acquire`` takes the references.
        """
        hits: list[CachedBlock] = []
        num_blocks = (len(token_ids) - 1) // self.page_size
        for index in range(num_blocks):
            tokens = self._block_tokens(token_ids, index)
            block = self._by_hash.get(self._hash(chain, token_ids, index))
            parent = hits[-1].serial if hits else None
            if block is None or not self._holds(block, parent, tokens, chain.extra_keys(index)):
                break
            hits.append(block)
        return hits

    def acquire(self, chain: BlockChain, hits: Sequence[CachedBlock]) -> list[int]:
        """Share the hit pages with a request whose chain starts empty; returns the pages."""
        if chain.serials:
            raise ValueError(f"chain already resolves {len(chain.serials)} blocks")
        pages = [block.page for block in hits]
        self.share(pages)
        chain.serials = [block.serial for block in hits]
        return pages

    def cache_full_blocks(
        self,
        chain: BlockChain,
        token_ids: Sequence[int],
        block_table: Sequence[int],
        num_computed_tokens: int,
    ) -> None:
        """Enter every full block whose KV is computed (tokens [0, num_computed_tokens)) and
        that the chain has not resolved yet.

        A block already cached under the same name stays on its own page, uncached: the chain
        resolves to the cached copy, so the request's later blocks still link to it.
        """
        num_full = min(num_computed_tokens // self.page_size, len(block_table))
        while len(chain.serials) < num_full and not chain.broken:
            index = len(chain.serials)
            block_hash = self._hash(chain, token_ids, index)
            tokens = self._block_tokens(token_ids, index)
            extra = chain.extra_keys(index)
            parent = chain.serials[-1] if chain.serials else None
            cached = self._by_hash.get(block_hash)
            if cached is None:
                block = CachedBlock(
                    block_hash, block_table[index], self._next_serial, parent, tokens, extra
                )
                self._next_serial += 1
                self._by_hash[block_hash] = block
                self._by_page[block.page] = block
                chain.serials.append(block.serial)
            elif self._holds(cached, parent, tokens, extra):
                chain.serials.append(cached.serial)
            else:
                chain.broken = True

    def _hash(self, chain: BlockChain, token_ids: Sequence[int], index: int) -> BlockHash:
        while len(chain.hashes) <= index:
            i = len(chain.hashes)
            parent = chain.hashes[-1] if chain.hashes else None
            tokens = self._block_tokens(token_ids, i)
            chain.hashes.append(self.hash_fn(parent, tokens, chain.extra_keys(i)))
        return chain.hashes[index]

    def _block_tokens(self, token_ids: Sequence[int], index: int) -> tuple[int, ...]:
        start = index * self.page_size
        return tuple(token_ids[start : start + self.page_size])

    @staticmethod
    def _holds(
        block: CachedBlock, parent: int | None, tokens: tuple[int, ...], extra: tuple
    ) -> bool:
        return (
            block.parent_serial == parent
            and block.token_ids == tokens
            and block.extra_keys == extra
        )

    def _evict(self, page: int) -> None:
        block = self._by_page.pop(page, None)
        if block is not None:
            del self._by_hash[block.block_hash]
            self.num_evictions += 1
