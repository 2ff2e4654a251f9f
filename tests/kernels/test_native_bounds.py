"""The native kernels refuse block tables that would make them read outside their buffers.

XLA's gathers clamp an out-of-range index; the C++ kernels index the pool directly, so a
corrupt block table (a page id outside the pool, a kv_len longer than the table's pages,
query rows past the batch) must come back as an FFI error naming the values, before any
page is read. Valid tables are covered by tests/kernels/test_native_attention.py.
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_native_attention import NUM_PAGES, PAGE_SIZE, PAGES_PER_SEQ, decode_case

from claimbench.kernels import native_attention
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: the native kernel cannot be built here",
)

DECODE_ARGS = (jnp.float32, 0.25, None, None)
# An FFI InvalidArgument reaches Python as JaxRuntimeError or, on some dispatch paths, as
# ValueError; the message is the kernel's either way.
FFI_ERROR = (jax.errors.JaxRuntimeError, ValueError)
LENS = [5, 2 * PAGE_SIZE, 3]


def run_decode(q, cache, md):
    fn = jax.jit(lambda q, c, m: native_attention.paged_decode_attention(q, c, m, *DECODE_ARGS))
    return np.asarray(fn(q, cache, md))


def with_table(md: AttentionMetadata, table: np.ndarray, kv_lens=None) -> AttentionMetadata:
    return AttentionMetadata(
        md.slot_mapping,
        md.cu_q_lens,
        md.kv_lens if kv_lens is None else jnp.asarray(kv_lens, jnp.int32),
        jnp.asarray(table, jnp.int32),
        md.num_seqs,
        md.distribution,
    )


@pytest.mark.parametrize("storage", ["f32", "int8"])
@pytest.mark.parametrize("bad_page", [NUM_PAGES, 9999, -1])
def test_decode_rejects_a_page_outside_the_pool(storage, bad_page):
    q, cache, md = decode_case(LENS, len(LENS), 4, 4, 16, storage)
    assert np.isfinite(run_decode(q, cache, md)).all()  # the valid table runs
    table = np.asarray(md.page_indices).copy()
    table[1, 1] = bad_page  # sequence 1 reads both of its pages
    pattern = (
        f"paged_decode: sequence 1: page index {bad_page} at block table entry 1 "
        f"is outside the pool \\[0, num_pages={NUM_PAGES}\\)"
    )
    with pytest.raises(FFI_ERROR, match=pattern):
        run_decode(q, cache, with_table(md, table))


def test_decode_ignores_entries_past_the_kv_len():
    # Entries a sequence does not reach are never read: garbage there is not an error.
    q, cache, md = decode_case(LENS, len(LENS), 4, 4, 16, "f32")
    table = np.asarray(md.page_indices).copy()
    table[0, 2:] = 9999  # sequence 0 holds 5 tokens: entries 0 and 1
    np.testing.assert_array_equal(
        run_decode(q, cache, with_table(md, table)), run_decode(q, cache, md)
    )


def test_decode_rejects_a_kv_len_beyond_the_tables_pages():
    q, cache, md = decode_case(LENS, len(LENS), 4, 4, 16, "f32")
    too_long = PAGE_SIZE * PAGES_PER_SEQ + 1
    kv_lens = np.asarray(md.kv_lens).copy()
    kv_lens[2] = too_long
    pattern = (
        f"paged_decode: sequence 2: kv_len={too_long} needs {PAGES_PER_SEQ + 1} pages of "
        f"{PAGE_SIZE}, the block table has pages_per_seq={PAGES_PER_SEQ}"
    )
    with pytest.raises(FFI_ERROR, match=pattern):
        run_decode(q, cache, with_table(md, md.page_indices, kv_lens))


def prefill_case():
    """qg f32[T, 2, 2, 16], a 24-page f32 cache and metadata: a decode slot, two chunks."""
    rng = np.random.default_rng(0)
    page_size, pages_per_seq, num_pages = 8, 4, 24
    specs = [(0, 1), (0, 20), (9, 7)]  # (cached tokens, new tokens)
    num_tokens = sum(n for _, n in specs)
    pages = jnp.asarray(rng.standard_normal((num_pages, page_size, 4, 16)), jnp.float32)
    table = rng.permutation(np.arange(1, num_pages))[: 3 * pages_per_seq].reshape(3, -1)
    md = AttentionMetadata(
        slot_mapping=jnp.zeros(num_tokens, jnp.int32),
        cu_q_lens=jnp.asarray([0, 1, 21, 28], jnp.int32),
        kv_lens=jnp.asarray([c + n for c, n in specs], jnp.int32),
        page_indices=jnp.asarray(table, jnp.int32),
        num_seqs=jnp.asarray([3], jnp.int32),
        distribution=jnp.asarray([1, 2, 3], jnp.int32),
    )
    qg = jnp.asarray(rng.standard_normal((num_tokens, 2, 2, 16)), jnp.float32)
    return qg, LayerKV(pages, None), md


def run_prefill(qg, cache, md):
    fn = jax.jit(native_attention.paged_prefill_attention, static_argnums=(3, 4, 5, 6))
    return np.asarray(fn(qg, cache, md, jnp.float32, 0.25, None, None, jnp.zeros_like(qg)))


def test_prefill_rejects_a_page_outside_the_pool():
    qg, cache, md = prefill_case()
    assert np.isfinite(run_prefill(qg, cache, md)).all()
    table = np.asarray(md.page_indices).copy()
    table[2, 1] = 24  # sequence 2 holds 16 tokens: entries 0 and 1 of pages of 8
    pattern = (
        "paged_prefill: sequence 2: page index 24 at block table entry 1 "
        "is outside the pool \\[0, num_pages=24\\)"
    )
    with pytest.raises(FFI_ERROR, match=pattern):
        run_prefill(qg, cache, with_table(md, table))


def test_prefill_rejects_a_kv_len_beyond_the_tables_pages():
    qg, cache, md = prefill_case()
    pattern = (
        "paged_prefill: sequence 1: kv_len=40 needs 5 pages of 8, "
        "the block table has pages_per_seq=4"
    )
    with pytest.raises(FFI_ERROR, match=pattern):
        run_prefill(qg, cache, with_table(md, md.page_indices, [1, 40, 16]))


def test_prefill_rejects_query_rows_past_the_batch():
    qg, cache, md = prefill_case()
    bad = AttentionMetadata(
        md.slot_mapping,
        jnp.asarray([0, 1, 21, 40], jnp.int32),  # 28 tokens in the batch
        jnp.asarray([1, 20, 40], jnp.int32),
        jnp.asarray(np.pad(np.asarray(md.page_indices), ((0, 0), (0, 1)), constant_values=1)),
        md.num_seqs,
        md.distribution,
    )
    pattern = (
        "paged_prefill: sequence 2: query rows \\[21, 40\\) with kv_len=40 do not fit num_tokens=28"
    )
    with pytest.raises(FFI_ERROR, match=pattern):
        run_prefill(qg, cache, bad)
