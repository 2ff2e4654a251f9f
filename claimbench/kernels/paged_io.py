"""Reading and writing the paged KV cache from XLA: the step's KV write, per-sequence gathers.

Pages are [num_pages, page_size, 2 * num_kv_heads, head_dim] with K and V interleaved on
the row axis (kv_quant.py); a sequence's tokens live in the pages its block table lists.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    LayerKV,
    dequantize_rows,
    fp8_row_scales,
    from_container,
    interleave_kv,
    page_row_scales,
    quantize_rows,
    to_container,
    value_dtype,
    write_row_scales,
)


def write_kv(cache: LayerKV, k: jax.Array, v: jax.Array, slot_mapping: jax.Array) -> LayerKV:
    """Scatter the step's new K/V into the pages, quantizing to the page dtype.

    k, v: f[T, num_kv_heads, head_dim]; slot_mapping: i32[T] (page * page_size + offset).
    """
    pages = cache.pages
    num_pages, page_size, num_rows, head_dim = pages.shape
    stored, row_scales = quantize_rows(interleave_kv(k, v), cache.scales, value_dtype(cache))
    flat = pages.reshape(num_pages * page_size, num_rows, head_dim)
    pages = flat.at[slot_mapping].set(to_container(stored, pages.dtype)).reshape(pages.shape)
    scales = cache.scales
    if row_scales is not None:
        scales = write_row_scales(scales, slot_mapping, row_scales, page_size)
    return LayerKV(pages, scales, cache.f16_bits)


def gather_sequences(cache: LayerKV, page_indices: jax.Array, dtype) -> jax.Array:
    """Dequantized K/V rows of every listed block table: f[N, pages * page_size, 2H, D]."""
    num_seqs, pages_per_seq = page_indices.shape
    _, page_size, num_rows, head_dim = cache.pages.shape
    kv = cache.pages[page_indices].reshape(num_seqs, pages_per_seq * page_size, num_rows, head_dim)
    kv = from_container(kv, value_dtype(cache))
    if kv.dtype == jnp.int8:
        row_scales = page_row_scales(cache.scales[page_indices], page_size, num_rows)
        row_scales = row_scales.reshape(num_seqs, pages_per_seq * page_size, num_rows)
    elif kv.dtype == FP8_DTYPE:
        row_scales = fp8_row_scales(cache.scales, num_rows)
    else:
        row_scales = None
    return dequantize_rows(kv, row_scales, dtype)


def decode_lens(md, num_slots: int) -> jax.Array:
    """KV length of each of the first ``num_slots`` slots that is decode-only, else 0."""
    return jnp.where(jnp.arange(num_slots) < md.distribution[0], md.kv_lens[:num_slots], 0)
