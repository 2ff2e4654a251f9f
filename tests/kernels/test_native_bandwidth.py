"""The native read (native/read_bandwidth.cc) reads every element once, on any thread count."""

from __future__ import annotations

import numpy as np
import pytest

from claimbench.kernels import native_bandwidth

pytestmark = pytest.mark.skipif(
    native_bandwidth.unavailable_reason() is not None,
    reason=f"native kernels unavailable: {native_bandwidth.unavailable_reason()}",
)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 16_384 + 7, 200_003])
def test_sum_is_exact_for_small_integers(n, threads):
    # Values 0..9: every partial sum stays an integer below 2**24 in each f32 lane, so the
    # sum is exact whatever the split; n covers a lone element, one vector group +- 1, and
    # blocks with tails.
    data = (np.arange(n) % 10).astype(np.float32)
    total, seconds = native_bandwidth.read_sum(data, threads)
    assert total == float(np.sum(data, dtype=np.float64))
    assert seconds > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_every_element_is_read(threads):
    # A single 1 moved over the array, at each thread's first and last element and in
    # block tails: a skipped element would leave the sum at 0.
    n = 3 * 16_384 + 129
    data = np.zeros(n, np.float32)
    for i in [0, 63, 64, n // 2 - 1, n // 2, n // 2 + 1, 16_384, n - 65, n - 1]:
        data[i] = 1.0
        assert native_bandwidth.read_sum(data, threads)[0] == 1.0, i
        data[i] = 0.0


def test_long_sums_keep_their_precision():
    # 2**25 ones: one f32 accumulator would stop at 2**24; the lanes go into a double per
    # block and the total is exact.
    data = np.ones(2**25, np.float32)
    assert native_bandwidth.read_sum(data, 2)[0] == 2**25


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="contiguous f32"):
        native_bandwidth.read_sum(np.ones(8, np.float64), 1)
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        native_bandwidth.read_sum(np.ones(8, np.float32), 0)


def test_last_level_cache_size_is_read_from_sysfs(tmp_path, monkeypatch):
    size = tmp_path / "size"
    size.write_text("32768K\n")
    monkeypatch.setattr(native_bandwidth, "L3_SIZE_FILE", size)
    assert native_bandwidth.last_level_cache_bytes() == 32 * 2**20
    size.write_text("96M\n")
    assert native_bandwidth.last_level_cache_bytes() == 96 * 2**20
    size.unlink()
    assert native_bandwidth.last_level_cache_bytes() == native_bandwidth.DEFAULT_L3_BYTES


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("page_floats", [64, 4096, 1000])
def test_paged_read_sums_the_listed_pages_in_any_order(page_floats, threads):
    # Each page holds its own index (small integers: exact sums): the total says which pages
    # were read and how often, whatever the order, repeats and the split over threads.
    pool = np.repeat(np.arange(40, dtype=np.float32)[:, None], page_floats, axis=1)
    rng = np.random.default_rng(page_floats + threads)
    pages = np.concatenate([rng.permutation(40)[:25], [7, 7, 39, 0]]).astype(np.int32)
    total, seconds = native_bandwidth.read_pages(pool, pages, threads)
    assert total == float(page_floats * pages.sum())
    assert seconds > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_paged_read_reads_every_element_of_a_page(threads):
    # One 1 moved over the listed page (its ends, a vector group's edges, the tail after the
    # last whole group) and onto a page not listed, which must not count.
    pool = np.zeros((6, 1000), np.float32)
    pages = np.array([3, 1, 4], np.int32)
    for i in [0, 63, 64, 500, 959, 960, 999]:
        pool[1, i] = 1.0
        assert native_bandwidth.read_pages(pool, pages, threads)[0] == 1.0, i
        pool[1, i] = 0.0
    pool[2, 0] = 1.0
    assert native_bandwidth.read_pages(pool, pages, threads)[0] == 0.0


def test_paged_read_refuses_bad_input():
    pool = np.ones((4, 64), np.float32)
    with pytest.raises(ValueError, match=r"page indices must be in \[0, 4\), got 0..4"):
        native_bandwidth.read_pages(pool, np.array([0, 4]), 1)
    with pytest.raises(ValueError, match="contiguous f32"):
        native_bandwidth.read_pages(np.ones(64, np.float32), np.array([0]), 1)
    with pytest.raises(ValueError, match="1-D list"):
        native_bandwidth.read_pages(pool, np.zeros((2, 2)), 1)
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        native_bandwidth.read_pages(pool, np.array([0]), 0)
