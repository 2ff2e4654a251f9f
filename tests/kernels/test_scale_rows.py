"""int8 scale rows for the Pallas kernel (kernels/scale_rows.py), in Pallas interpret mode,
against their pure-jnp references: the page-row gather under each kv_len, the merge of the
step's new scales, the write-back of the pages holding new tokens."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from claimbench.kernels.kv_quant import int8_scales_shape, page_row_scales
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.kernels.scale_rows import (
    gather_scale_rows,
    gather_scale_rows_reference,
    merge_new_scales,
    write_scale_rows,
    write_scale_rows_reference,
)

PAGE_SIZE, ROWS, NUM_PAGES, PAGES_PER_SEQ = 4, 6, 40, 5
INTERPRET = pltpu.InterpretParams()


def case(seed: int = 0):
    """Scales with distinct values and a step: a decode token, a 6-token prefill of a
    cached prefix, a fresh 9-token prompt, a padded sequence slot and 2 padded tokens."""
    rng = np.random.default_rng(seed)
    scales = jnp.asarray(rng.uniform(0.5, 2.0, int8_scales_shape(NUM_PAGES, PAGE_SIZE, ROWS)))
    q_lens, kv_lens = [1, 6, 9, 0], [7, 13, 9, 0]
    table = np.full((4, PAGES_PER_SEQ), NULL_PAGE, np.int32)
    free = list(rng.permutation(np.arange(1, NUM_PAGES)))
    for i, n in enumerate(kv_lens):
        for j in range(-(-n // PAGE_SIZE)):
            table[i, j] = free.pop()
    table[0, 3:] = 39  # entries past a kv_len are never read
    md = AttentionMetadata(
        slot_mapping=jnp.zeros(18, jnp.int32),
        cu_q_lens=jnp.asarray(np.concatenate([[0], np.cumsum(q_lens)]), jnp.int32),
        kv_lens=jnp.asarray(kv_lens, jnp.int32),
        page_indices=jnp.asarray(table),
        num_seqs=jnp.asarray([3], jnp.int32),
        distribution=jnp.asarray([1, 3, 3], jnp.int32),
    )
    new = jnp.asarray(rng.uniform(3.0, 4.0, (18, ROWS)), jnp.float32)
    return scales.astype(jnp.float32), md, new


def test_gather_matches_the_reference_and_fills_unused_rows():
    scales, md, _ = case()
    got = gather_scale_rows(
        scales, md.page_indices, md.kv_lens, page_size=PAGE_SIZE, fill=1.0, interpret=INTERPRET
    )
    want = gather_scale_rows_reference(scales, md.page_indices, md.kv_lens, PAGE_SIZE, 1.0)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert np.all(np.asarray(got)[0, 2:] == 1.0)  # 7 tokens: pages 0 and 1 only
    np.testing.assert_array_equal(np.asarray(got)[1, 3], np.asarray(scales)[md.page_indices[1, 3]])


def test_merge_puts_each_new_scale_at_its_position():
    scales, md, new = case()
    rows = gather_scale_rows_reference(scales, md.page_indices, md.kv_lens, PAGE_SIZE, 1.0)
    merged = merge_new_scales(rows, new, md, PAGE_SIZE)
    merged = np.asarray(page_row_scales(merged, PAGE_SIZE, ROWS))
    # Token 1 is sequence 1's first new token, at position 13 - 6 = 7: page 1, offset 3.
    np.testing.assert_array_equal(merged[1, 1, 3], np.asarray(new)[1])
    # Token 0 decodes sequence 0 at position 6; token 7 starts the fresh prompt at 0.
    np.testing.assert_array_equal(merged[0, 1, 2], np.asarray(new)[0])
    np.testing.assert_array_equal(merged[2, 0, 0], np.asarray(new)[7])
    # Exactly the 16 real tokens changed; the 2 padded tokens went nowhere.
    before = np.asarray(page_row_scales(rows, PAGE_SIZE, ROWS))
    changed = np.any(merged != before, axis=-1)
    assert changed.sum() == 16


@pytest.mark.slow
def test_write_back_matches_the_reference_in_place():
    scales, md, new = case()
    rows = gather_scale_rows_reference(scales, md.page_indices, md.kv_lens, PAGE_SIZE, 1.0)
    rows = merge_new_scales(rows, new, md, PAGE_SIZE)
    want = write_scale_rows_reference(scales, rows, md, PAGE_SIZE)
    got = write_scale_rows(scales, rows, md, page_size=PAGE_SIZE, interpret=INTERPRET)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # Pages written: sequence 0's page 1, sequence 1's pages 1..3, sequence 2's pages 0..2.
    table = np.asarray(md.page_indices)
    written = {table[0, 1], *table[1, 1:4], *table[2, :3]}
    differs = np.flatnonzero(np.any(np.asarray(got) != np.asarray(scales), axis=1))
    assert set(differs.tolist()) == written
