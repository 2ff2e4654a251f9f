"""int8 scale rows for the Pallas kernel: gathered per block table, updated, written back.

int8 scales are f32[num_pages, L], one row of L lanes per page (kv_quant.py). The
attention kernel wants each KV block's scales with tokens on lanes, which a DMA cannot
cut out of the pool's rows (a DMA starts only at a multiple of 128 lanes, and a page's
tokens are a 16- or 64-lane part of its row). So per layer and step:

1. ``gather_scale_rows``: one row DMA per page under each sequence's kv_len, HBM to HBM,
   into f32[N, pages, L] (rows past kv_len keep a finite fill);
2. ``merge_new_scales``: the step's new tokens' scales set into those rows (XLA, on the
   small gathered array);
3. ``write_scale_rows``: the rows of the pages holding new tokens DMAed back into the
   pool, in place (the pool's row is replaced whole: the other tokens' scales in it are
   the ones just gathered).

The pool is touched only by these DMAs, pinned to HBM: left to XLA, a scatter or gather
on it makes XLA's memory-space assignment prefetch a layer's whole scales into VMEM and
copy them back, every step. Each step has a pure-jnp reference (``*_reference``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from claimbench.kernels.metadata import AttentionMetadata

Interpret = bool | pltpu.InterpretParams
_HBM = pl.BlockSpec(memory_space=pl.ANY)


def _for_each(num_seqs, page_range, body) -> None:
    """body(i, j) for every sequence i < num_seqs and page j in page_range(i) = (lo, hi)."""

    def seq(i, carry):
        lo, hi = page_range(i)

        def page(j, c):
            body(i, j)
            return c

        return lax.fori_loop(lo, hi, page, carry)

    lax.fori_loop(0, num_seqs, seq, 0)


def _row_copies(num_seqs, page_range, copy) -> None:
    """Start every row copy, then wait for each: their latencies overlap, and each wait
    takes one row's worth off the shared semaphore."""
    _for_each(num_seqs, page_range, lambda i, j: copy(i, j).start())
    _for_each(num_seqs, page_range, lambda i, j: copy(i, j).wait())


def used_pages(kv_lens: jax.Array, page_size: int, pages_per_seq: int):
    """Pages under each kv_len, capped at the block table's width."""
    return jnp.minimum((kv_lens + page_size - 1) // page_size, pages_per_seq)


def gather_scale_rows_reference(
    scales: jax.Array, page_indices: jax.Array, kv_lens: jax.Array, page_size: int, fill: float
) -> jax.Array:
    """f32[N, pages_per_seq, L]: scales[page_indices], rows past each kv_len ``fill``."""
    pages = jnp.arange(page_indices.shape[1])
    used = pages[None, :] < used_pages(kv_lens, page_size, page_indices.shape[1])[:, None]
    return jnp.where(used[..., None], scales[page_indices], jnp.asarray(fill, scales.dtype))


@functools.partial(jax.jit, static_argnames=("page_size", "fill", "interpret"))
def gather_scale_rows(
    scales: jax.Array,
    page_indices: jax.Array,
    kv_lens: jax.Array,
    *,
    page_size: int,
    fill: float = 1.0,
    interpret: Interpret = False,
) -> jax.Array:
    """scales f32[num_pages, L], page_indices i32[N, pages_per_seq], kv_lens i32[N] ->
    f32[N, pages_per_seq, L], as ``gather_scale_rows_reference``."""
    num_seqs, pages_per_seq = page_indices.shape
    num_pages = scales.shape[0]

    def kernel(table_ref, lens_ref, scales_hbm, _init, out_hbm, sem):
        def copy(i, j):
            # Clamped like XLA's gather: a corrupt table reads a wrong page, never past
            # the pool (the attention wrapper rejects such tables when it can see them).
            page = jnp.clip(table_ref[i * pages_per_seq + j], 0, num_pages - 1)
            dst = out_hbm.at[i, pl.ds(j, 1)]
            return pltpu.make_async_copy(scales_hbm.at[pl.ds(page, 1)], dst, sem.at[0])

        def page_range(i):
            return 0, used_pages(lens_ref[i], page_size, pages_per_seq)

        _row_copies(num_seqs, page_range, copy)

    init = jnp.full((num_seqs, pages_per_seq, scales.shape[1]), fill, scales.dtype)
    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            in_specs=[_HBM, _HBM],
            out_specs=_HBM,
            grid=(1,),
            scratch_shapes=[pltpu.SemaphoreType.DMA((1,))],
        ),
        out_shape=jax.ShapeDtypeStruct(init.shape, init.dtype),
        input_output_aliases={3: 0},
        # The DMAs move at most the gathered rows, in and out; not the pool they come from.
        cost_estimate=pl.CostEstimate(
            flops=0, transcendentals=0, bytes_accessed=2 * init.size * init.dtype.itemsize
        ),
        interpret=interpret,
        name="claimbench_gather_scale_rows",
    )(
        page_indices.reshape(-1).astype(jnp.int32),
        kv_lens.astype(jnp.int32),
        pltpu.with_memory_space_constraint(scales, pltpu.HBM),
        init,
    )


def merge_new_scales(
    rows: jax.Array, new_scales: jax.Array, md: AttentionMetadata, page_size: int
) -> jax.Array:
    """Gathered rows f32[N, pages, L] with the step's new tokens' scales f32[T, 2H] set
    where the metadata places each token (kv_lens, cu_q_lens); tokens of no sequence are
    dropped.

    A sequence's new tokens are consecutive both in the batch and in its pages, and rows
    are token-major, so its new scales are one slice of the flattened batch's, shifted by
    (first token - first new position) rows: one window per sequence and a select, where
    a scatter of T * 2H single floats would cost XLA on TPU far more than the rows hold.
    """
    num_seqs, num_pages, num_lanes = rows.shape
    num_tokens, num_rows = new_scales.shape
    width = page_size * num_rows  # a page's used lanes
    span = num_pages * width
    used = rows[..., :width].reshape(num_seqs, span)
    # Padded so that every window, from (start - context) * 2H, lies inside.
    flat = jnp.pad(new_scales.reshape(-1), (span, span))
    start, end = md.cu_q_lens[:-1], md.cu_q_lens[1:]
    context = md.kv_lens - (end - start)  # cached tokens before the new ones
    offsets = span + (start - context) * num_rows
    windows = jax.vmap(lambda o: lax.dynamic_slice(flat, (o,), (span,)))(offsets)
    lane = jnp.arange(span)
    live = jnp.arange(num_seqs) < md.num_seqs[0]
    is_new = (
        live[:, None]
        & (lane[None, :] >= context[:, None] * num_rows)
        & (lane[None, :] < md.kv_lens[:, None] * num_rows)
    )
    merged = jnp.where(is_new, windows, used).reshape(num_seqs, num_pages, width)
    return rows.at[..., :width].set(merged)


def write_scale_rows_reference(
    scales: jax.Array, rows: jax.Array, md: AttentionMetadata, page_size: int
) -> jax.Array:
    """scales with each real sequence's rows of the pages holding its new tokens written."""
    num_seqs, pages_per_seq = md.page_indices.shape
    q_lens = jnp.diff(md.cu_q_lens)
    first = (md.kv_lens - q_lens) // page_size
    last = used_pages(md.kv_lens, page_size, pages_per_seq)
    pages = jnp.arange(pages_per_seq)[None, :]
    live = jnp.arange(num_seqs)[:, None] < md.num_seqs[0]
    written = live & (pages >= first[:, None]) & (pages < last[:, None]) & (q_lens[:, None] > 0)
    target = jnp.where(written, md.page_indices, scales.shape[0])  # out of range: dropped
    return scales.at[target].set(rows[:, :pages_per_seq], mode="drop")


@functools.partial(jax.jit, static_argnames=("page_size", "interpret"))
def write_scale_rows(
    scales: jax.Array,
    rows: jax.Array,
    md: AttentionMetadata,
    *,
    page_size: int,
    interpret: Interpret = False,
) -> jax.Array:
    """scales f32[num_pages, L] (aliased: in place under jit with the pool donated) with
    rows f32[N, >= pages, L] DMAed into the pages holding each real sequence's new
    tokens, as ``write_scale_rows_reference``."""
    num_seqs, pages_per_seq = md.page_indices.shape
    num_pages = scales.shape[0]

    def kernel(table_ref, lens_ref, cu_ref, count_ref, rows_hbm, _scales_in, scales_hbm, sem):
        def copy(i, j):
            page = jnp.clip(table_ref[i * pages_per_seq + j], 0, num_pages - 1)
            dst = scales_hbm.at[pl.ds(page, 1)]
            return pltpu.make_async_copy(rows_hbm.at[i, pl.ds(j, 1)], dst, sem.at[0])

        def page_range(i):
            q_len = cu_ref[i + 1] - cu_ref[i]
            first = (lens_ref[i] - q_len) // page_size
            last = used_pages(lens_ref[i], page_size, pages_per_seq)
            return jnp.where(q_len > 0, first, last), last

        _row_copies(count_ref[0], page_range, copy)

    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            in_specs=[_HBM, _HBM],
            out_specs=_HBM,
            grid=(1,),
            scratch_shapes=[pltpu.SemaphoreType.DMA((1,))],
        ),
        out_shape=jax.ShapeDtypeStruct(scales.shape, scales.dtype),
        input_output_aliases={5: 0},
        # At most every gathered row, read and written; the rest of the pool is untouched.
        cost_estimate=pl.CostEstimate(
            flops=0, transcendentals=0, bytes_accessed=2 * rows.size * rows.dtype.itemsize
        ),
        interpret=interpret,
        name="claimbench_write_scale_rows",
    )(
        md.page_indices.reshape(-1).astype(jnp.int32),
        md.kv_lens.astype(jnp.int32),
        md.cu_q_lens.astype(jnp.int32),
        md.num_seqs.astype(jnp.int32),
        rows,
        pltpu.with_memory_space_constraint(scales, pltpu.HBM),
    )
