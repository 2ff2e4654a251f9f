"""The allocator keeps a sequence's pages adjacent and ascending where it can, and still takes
cached pages least recently released first."""

from __future__ import annotations

from engine_helpers import make_request

from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.kv.prefix_cache import BlockChain, BlockPool

PS = 4


def test_a_finished_sequences_pages_come_back_ascending():
    pool = BlockPool(16, PS)
    first = pool.allocate(6)
    assert first == [1, 2, 3, 4, 5, 6] and pool.allocate(9) == list(range(7, 16))
    pool.release(first[::-1])  # as BlockManager.free: last page first, so the queue is 6..1
    # The head, page 6, tops a run of free pages: the next table takes it from below, ascending.
    assert pool.allocate(4) == [3, 4, 5, 6]
    assert pool.allocate(2) == [1, 2]


def test_a_growing_table_takes_the_page_after_its_last_out_of_turn():
    pool = BlockPool(16, PS)
    pool.allocate(15)
    pool.release([9, 3, 4])  # the queue: 9, 3, 4
    assert pool.allocate(1, after=2) == [3]  # not the head (9): page 3 follows the table's 2
    assert pool.allocate(1, after=3) == [4]
    assert pool.allocate(1, after=4) == [9]  # page 5 is held: the head


def test_without_a_free_neighbour_pages_leave_in_queue_order():
    pool = BlockPool(16, PS)
    pool.allocate(15)
    pool.release([9, 3, 12])
    assert pool.allocate(3) == [9, 3, 12]


def test_cached_pages_leave_least_recently_released_first_and_never_for_adjacency():
    pool = BlockPool(12, PS)
    tokens = list(range(100, 112))  # 3 full blocks
    table = pool.allocate(3)
    pool.cache_full_blocks(BlockChain(None), tokens, table, len(tokens))
    rest = pool.allocate(8)  # pages 4..11: every page is held
    pool.release(table[::-1])  # cached 3, 2, 1 join the queue
    pool.release([rest[0]])  # then page 4, uncached
    assert pool.allocate(1) == [3] and pool.num_evictions == 1  # a cached head goes first
    # A table ending at page 3 takes page 4 out of turn: free and uncached, it holds nothing,
    # so the cached pages 2 and 1 keep their blocks.
    assert pool.allocate(1, after=3) == [4] and pool.num_cached_blocks == 2
    # Page 5 is held: the cached head, page 2, is evicted, not page 1 below it.
    assert pool.allocate(1, after=4) == [2] and pool.num_evictions == 2


def test_the_block_manager_grows_a_table_into_its_neighbours_freed_pages():
    manager = BlockManager(num_pages=32, page_size=PS)
    requests = [make_request(9) for _ in range(3)]
    for r in requests:
        manager.allocate(r, 9)
        r.num_computed_tokens = 9
    assert [r.block_table for r in requests] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    manager.free(requests[1])  # pages 6, 5, 4 join the queue's tail
    manager.allocate(requests[0], 8)  # two more pages: 4 and 5 follow its 3
    assert requests[0].block_table == [1, 2, 3, 4, 5]
    fresh = make_request(12)
    manager.allocate(fresh, 12)
    assert fresh.block_table == [10, 11, 12]  # the head, 10, has a held page (9) below it
