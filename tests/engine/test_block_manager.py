import jax.numpy as jnp
import pytest
from engine_helpers import TINY_MODEL, make_request

from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.kv.kv_cache import (
    allocate_kv_cache,
    kv_bytes_per_token,
    max_concurrent_sequences,
    num_pages_for_pool,
    pool_bytes,
)
from claimbench.kernels.kv_quant import FP8_DTYPE
from claimbench.kernels.metadata import NULL_PAGE


def test_allocate_grows_table_and_never_hands_out_null_page():
    bm = BlockManager(num_pages=6, page_size=4)
    r = make_request(9)
    assert bm.num_new_pages(r, 9) == 3  # ceil(9 / 4)
    bm.allocate(r, 9)
    assert len(r.block_table) == 3 and NULL_PAGE not in r.block_table
    assert (bm.num_used_pages, bm.num_free_pages) == (3, 2)
    r.num_computed_tokens = 9
    assert bm.num_new_pages(r, 3) == 0  # tokens 10..12 fit the third page
    assert bm.num_new_pages(r, 4) == 1
    bm.allocate(r, 4)
    assert len(set(r.block_table)) == 4


def test_can_allocate_and_free_return_pages():
    bm = BlockManager(num_pages=4, page_size=4)
    a, b = make_request(8, tenant="x"), make_request(5, tenant="y")
    bm.allocate(a, 8)
    assert not bm.can_allocate(b, 5)
    with pytest.raises(ValueError, match="needs 2 pages, 1 free"):
        bm.allocate(b, 5)
    assert bm.tenant_pages == {"x": 2}
    bm.free(a)
    assert a.block_table == [] and bm.num_free_pages == 3 and bm.tenant_pages == {}
    bm.allocate(b, 5)
    assert bm.tenant_pages == {"y": 2}


def test_block_manager_rejects_tiny_pool():
    with pytest.raises(ValueError, match="got 1"):
        BlockManager(num_pages=1, page_size=16)


@pytest.mark.parametrize(
    "dtype, per_layer_token",
    [
        # 2 KV heads -> 4 rows of head_dim 16: 64 values per layer per token.
        (jnp.bfloat16, 64 * 2),
        (jnp.float32, 64 * 4),
        (jnp.int8, 64 * 1 + 4 * 4),  # plus one f32 scale per row
        (FP8_DTYPE, 64 * 1),
    ],
)
def test_kv_accounting_matches_allocated_arrays(dtype, per_layer_token):
    assert kv_bytes_per_token(TINY_MODEL, dtype) == 2 * per_layer_token
    budget = 10_000
    num_pages = num_pages_for_pool(TINY_MODEL, dtype, 4, budget)
    caches = allocate_kv_cache(TINY_MODEL, num_pages, 4, dtype)
    allocated = sum(c.pages.nbytes + (0 if c.scales is None else c.scales.nbytes) for c in caches)
    assert allocated == pool_bytes(TINY_MODEL, dtype, 4, num_pages) <= budget
    assert pool_bytes(TINY_MODEL, dtype, 4, num_pages + 1) > budget
    assert caches[0].pages.shape == (num_pages, 4, 4, 16)
    if dtype == FP8_DTYPE:
        assert caches[0].scales.tolist() == [1.0, 1.0]


@pytest.mark.slow
def test_pool_too_small_and_max_concurrency():
    with pytest.raises(ValueError, match="need >= 2"):
        num_pages_for_pool(TINY_MODEL, jnp.float32, 16, 1000)
    assert max_concurrent_sequences(num_usable_pages=100, page_size=16, seq_len=33) == 33
    assert max_concurrent_sequences(num_usable_pages=100, page_size=16, seq_len=32) == 50
