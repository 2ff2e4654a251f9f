"""Prefix cache: the hash chain, hits and their limits, references, LRU eviction, collisions."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claimbench.engine.kv.prefix_cache import (
    ROOT_HASH,
    BlockChain,
    BlockPool,
    cache_salt,
    hash_block_tokens,
)
from claimbench.kernels.metadata import NULL_PAGE

PS = 4  # page size of every pool here


def compute(pool: BlockPool, tokens: list[int], salt: str | None = None) -> tuple[BlockChain, list]:
    """Admit a request: share its hits, allocate the rest, compute it all, cache its blocks."""
    chain = BlockChain(salt)
    hits = pool.match(chain, tokens)
    table = pool.acquire(chain, hits)
    table += pool.allocate(-(-len(tokens) // PS) - len(table))
    pool.cache_full_blocks(chain, tokens, table, len(tokens))
    return chain, table


def test_hash_chain_mixes_parent_tokens_and_extra_keys():
    a = hash_block_tokens(None, [1, 2, 3, 4])
    assert a == hash_block_tokens(None, (1, 2, 3, 4)) and len(a) == 32
    expected = hashlib.sha256(ROOT_HASH)
    expected.update((1).to_bytes(8, "little") + (2).to_bytes(8, "little"))
    expected.update(b"()")
    assert hash_block_tokens(None, [1, 2]) == expected.digest()  # stable across processes
    assert hash_block_tokens(None, [1, 2, 3, 4], ("t1",)) != a
    assert hash_block_tokens(a, [5, 6, 7, 8]) != hash_block_tokens(
        hash_block_tokens(None, [9, 2, 3, 4]), [5, 6, 7, 8]
    )


def test_cache_salt_per_mode():
    assert cache_salt("per-tenant", "acme", "x") == "acme"
    assert cache_salt("shared", "acme", "x") is None
    assert cache_salt("salted", "acme", "x") == "x"
    assert cache_salt("salted", "acme", None) is None
    with pytest.raises(ValueError, match="'tenant' is not one of"):
        cache_salt("tenant", "acme", None)


def test_longest_prefix_hits_and_last_token_is_always_recomputed():
    pool = BlockPool(16, PS)
    prompt = list(range(10, 22))  # 3 full blocks
    _, table = compute(pool, prompt)
    assert pool.num_cached_blocks == 3
    # Same 12 tokens: only 2 blocks may hit, so the 12th token is computed and has logits.
    assert [b.page for b in pool.match(BlockChain(None), prompt)] == table[:2]
    # 13 tokens sharing all 3 blocks: all 3 hit, the 13th is computed.
    assert [b.page for b in pool.match(BlockChain(None), prompt + [99])] == table
    # A different token in block 1 stops the match after block 0.
    diverged = prompt[:5] + [0] + prompt[6:] + [99]
    assert [b.page for b in pool.match(BlockChain(None), diverged)] == table[:1]
    # A partial last block is never cached: 14 tokens leave 2 in a fourth page.
    assert not pool.is_cached(compute(pool, prompt + [7, 8])[1][3])


def test_salt_separates_chains():
    pool = BlockPool(16, PS)
    prompt = list(range(9))
    compute(pool, prompt, salt="victim")
    assert len(pool.match(BlockChain("victim"), prompt)) == 2
    assert pool.match(BlockChain("attacker"), prompt) == []
    assert pool.match(BlockChain(None), prompt) == []
    # Only the first block carries the salt; the chain carries it to the second.
    chain = BlockChain("victim")
    pool.match(chain, prompt)
    assert chain.hashes[1] == hash_block_tokens(chain.hashes[0], prompt[4:8])


def test_hits_share_pages_by_reference_and_revive_free_ones():
    pool = BlockPool(8, PS)  # 7 usable pages
    prompt = list(range(9))
    chain_a, table_a = compute(pool, prompt)
    assert pool.num_free_pages == 4
    chain_b = BlockChain(None)
    hits = pool.match(chain_b, prompt)
    assert pool.num_revived(hits) == 0  # a still holds them
    pool.acquire(chain_b, hits)
    assert [pool.ref_counts[p] for p in table_a] == [2, 2, 1]
    pool.release(reversed(table_a))
    assert [pool.ref_counts[p] for p in table_a] == [1, 1, 0]
    assert pool.num_free_pages == 5
    pool.release(reversed(table_a[:2]))
    assert pool.num_free_pages == 7 and pool.num_cached_blocks == 2  # free yet still cached
    chain_c = BlockChain(None)
    hits = pool.match(chain_c, prompt)
    assert pool.num_revived(hits) == 2
    pool.acquire(chain_c, hits)
    assert pool.num_free_pages == 5 and table_a[0] not in pool.free_queue()
    with pytest.raises(ValueError, match="already resolves 2 blocks"):
        pool.acquire(chain_c, hits)
    with pytest.raises(ValueError, match="released with reference count 0"):
        pool.release([table_a[2]])


def test_freed_cached_blocks_are_evicted_least_recently_released_first():
    pool = BlockPool(7, PS)  # 6 usable pages
    old = list(range(100, 109))  # 2 full blocks + 1 token
    new = list(range(200, 209))
    _, table_old = compute(pool, old)
    _, table_new = compute(pool, new)
    assert pool.num_free_pages == 0
    pool.release(reversed(table_old))  # a sequence's tail goes first: its head is likelier reused
    pool.release(reversed(table_new))
    assert pool.free_queue() == table_old[::-1] + table_new[::-1]
    taken = pool.allocate(2)  # the old partial page, then old's second block
    assert taken == [table_old[2], table_old[1]]
    assert pool.num_evictions == 1 and pool.num_cached_blocks == 3
    assert [b.page for b in pool.match(BlockChain(None), old)] == [table_old[0]]
    assert len(pool.match(BlockChain(None), new)) == 2


def test_allocate_never_hands_out_null_page_and_checks_room():
    pool = BlockPool(4, PS)
    assert NULL_PAGE not in pool.allocate(3)
    with pytest.raises(ValueError, match="need 1 pages, 0 free"):
        pool.allocate(1)


def test_duplicate_blocks_stay_uncached_and_the_chain_links_to_the_cached_copy():
    pool = BlockPool(16, PS)
    prompt = list(range(13))  # 3 full blocks
    # Two requests compute the same prefix side by side (neither could hit the other).
    a, b = BlockChain(None), BlockChain(None)
    table_a, table_b = pool.allocate(4), pool.allocate(4)
    pool.cache_full_blocks(a, prompt, table_a, 8)
    pool.cache_full_blocks(b, prompt, table_b, 12)
    pool.cache_full_blocks(a, prompt, table_a, 13)
    assert b.serials[:2] == a.serials[:2] and a.serials[2] == b.serials[2]
    cached = [pool.is_cached(p) for p in table_a[:3] + table_b[:3]]
    assert cached == [True, True, False, False, False, True]
    hits = pool.match(BlockChain(None), prompt + [1])
    assert [h.page for h in hits] == table_a[:2] + table_b[2:3]


def test_a_collision_never_returns_another_prefix():
    # Every block hashes alike: lookups must compare what the block holds.
    pool = BlockPool(16, PS, hash_fn=lambda parent, tokens, extra: b"same")
    first = list(range(9))
    _, table = compute(pool, first)
    assert pool.num_cached_blocks == 1  # the second block collided with the first
    assert [b.page for b in pool.match(BlockChain(None), first)] == table[:1]
    assert pool.match(BlockChain("t"), first) == []  # same tokens, other salt
    assert pool.match(BlockChain(None), [9, *first[1:]]) == []  # other tokens


def test_a_block_is_matched_only_under_its_own_parent():
    # Hashes ignore the parent, so a block's name is the same after any prefix.
    pool = BlockPool(9, PS, hash_fn=lambda parent, tokens, extra: bytes(tokens))
    q, p, tail = [1, 1, 1, 1], [2, 2, 2, 2], [7, 7, 7, 7]
    _, table_a = compute(pool, [*q, *tail, 0])
    _, table_c = compute(pool, [*p, 5, 5, 5, 5, 0])
    # b's first block hits c's; a's second block has b's second block's name and tokens but
    # was computed after another prefix, so its KV is not b's.
    b = [*p, *tail, 0]
    assert [h.page for h in pool.match(BlockChain(None), b)] == table_c[:1]
    chain_b, table_b = compute(pool, b)
    assert table_b[1] != table_a[1] and not pool.is_cached(table_b[1])
    assert chain_b.broken  # the name is taken, so b's copy cannot be cached


# -- property: a hit only ever returns KV of exactly the query's prefix --------------------

TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=14)  # few symbols: many shared prefixes
OPS = st.lists(
    st.tuples(st.sampled_from(["admit", "free"]), TOKENS, st.sampled_from([None, "a", "b"])),
    max_size=30,
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "hash_fn",
    [hash_block_tokens, lambda parent, tokens, extra: bytes([sum(tokens) % 3])],
    ids=["sha256", "colliding"],
)
@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_hits_hold_exactly_the_query_prefix(hash_fn, ops):
    pool = BlockPool(10, PS, hash_fn=hash_fn)
    kv: dict[int, tuple] = {}  # page -> (salt, every token up to its block's end): its real KV
    live: list[list[int]] = []
    for op, tokens, salt in ops:
        if op == "free":
            if live:
                pool.release(reversed(live.pop(len(tokens) % len(live))))
            continue
        chain = BlockChain(salt)
        hits = pool.match(chain, tokens)
        for i, block in enumerate(hits):
            assert kv[block.page] == (salt, tuple(tokens[: (i + 1) * PS]))
        assert len(hits) * PS < len(tokens)
        new = -(-len(tokens) // PS) - len(hits)
        if new + pool.num_revived(hits) > pool.num_free_pages:
            continue
        table = pool.acquire(chain, hits) + pool.allocate(new)
        for i in range(len(hits), len(table)):
            assert pool.ref_counts[table[i]] == 1 and not pool.is_cached(table[i])
            kv[table[i]] = (salt, tuple(tokens[: (i + 1) * PS]))
        pool.cache_full_blocks(chain, tokens, table, len(tokens))
        live.append(table)
    held = [0] * pool.num_pages
    for table in live:
        for page in table:
            held[page] += 1
    assert held == pool.ref_counts
    assert sorted(pool.free_queue()) == [p for p in range(1, pool.num_pages) if held[p] == 0]
