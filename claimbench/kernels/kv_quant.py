"""KV-cache storage formats: bf16/f32 as is, int8 with scales, fp8 e4m3 with a tensor scale.

A layer's cache is a ``LayerKV``: ``pages`` of shape
[num_pages, page_size, 2 * num_kv_heads, head_dim] with K and V interleaved on
the head axis (row 2h is K of head h, row 2h + 1 is V of head h), and
``scales``, whose shape depends on the storage dtype:

- bf16 / f16 / f32: ``None``.
- int8: f32[num_pages, scale_lanes], one symmetric scale per token and per K/V
  head row (absmax / 127). Row p holds page p's scales token-major (lane
  t * 2 * num_kv_heads + r for token t, head row r), padded to a multiple of 128
  lanes (``int8_scales_shape``). On TPU a narrow minor axis (the 4 head rows of a
  [num_pages, page_size, 4] array) makes XLA lay the array out page-axis-minor, so each
  layer's scales were relaid out, whole, for the kernel and back on every step; rows of
  whole 128-lane tiles keep their row-major layout, written in place and read by DMA.
- fp8 (float8_e4m3fn): f32[2] = (k_scale, v_scale), per tensor, 1.0 or
  calibrated from held-out text.

Pages may hold their values as the bits of another dtype of the same width ("containers"),
per attention backend; ``kv_container_dtype`` is the whole convention.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

INT8_MAX = 127.0
LANES = 128  # TPU vector lanes: int8 scale rows are whole multiples of it
FP8_DTYPE = jnp.float8_e4m3fn
FP8_MAX = float(jnp.finfo(FP8_DTYPE).max)  # 448

# XLA:CPU cannot scatter into a bf16 or fp8 buffer in place: it widens the whole donated
# pool to f32 and back on every KV write (measured: 43 ms per 32-token write into a
# 32 MiB bf16 pool, against 0.01 ms for f32 or int16). An unsigned integer of the same
# width scatters in place, so the XLA path may hold such pages as raw bits ("bit
# containers"); values are bitcast on the way in and on the way out, never converted.
BIT_CONTAINERS = {jnp.dtype(jnp.bfloat16): jnp.uint16, jnp.dtype(FP8_DTYPE): jnp.uint8}
CONTAINED = {jnp.dtype(c): d for d, c in BIT_CONTAINERS.items()}
# Mosaic (Pallas TPU) neither loads, stores nor takes f16 arrays, so the Pallas path holds f16
# pages as bf16-typed arrays of their bits (DMAs copy them exactly; the kernel decodes them,
# rpa_kernel.f16_bits_to_f32). The pool is allocated that way, not bitcast per call: XLA:TPU
# runs a bitcast-convert as a pass over the whole array, so bitcasting the pool in and out of
# the kernel moved every layer's cache each step (v6e, tiny model: each bitcast a fusion of
# its own, the pool staged through VMEM by copies). bf16 alone cannot tell f16 bits from bf16
# values: LayerKV.f16_bits does.
F16_CONTAINER = jnp.dtype(jnp.bfloat16)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LayerKV:
    pages: jax.Array  # [num_pages, page_size, 2 * num_kv_heads, head_dim]
    scales: jax.Array | None  # see module docstring
    # Static: the pages are bf16-typed containers of f16 bits (kv_container_dtype, "pallas").
    f16_bits: bool = field(default=False, metadata={"static": True})


def kv_container_dtype(storage_dtype: jnp.dtype, attention_backend: str) -> jnp.dtype:
    """The dtype a pool of ``storage_dtype`` values is allocated in for a resolved attention
    backend name. "pallas": f16 in bf16 containers (F16_CONTAINER, marked ``f16_bits``), the
    rest as is, Mosaic reading bf16 and fp8 pages as what they are. "xla" and "cpu": bf16 and
    fp8 in same-width unsigned ints (BIT_CONTAINERS, told apart by dtype), the rest as is."""
    storage_dtype = jnp.dtype(storage_dtype)
    if attention_backend == "pallas":
        return F16_CONTAINER if storage_dtype == jnp.float16 else storage_dtype
    return container_dtype(storage_dtype)


def value_dtype(cache: LayerKV) -> jnp.dtype:
    """The dtype of the values a cache's pages hold: their own, or the one they contain."""
    if cache.f16_bits:
        return jnp.dtype(jnp.float16)
    return logical_dtype(cache.pages.dtype)


def kv_storage_dtype(kv_dtype: str, compute_dtype: jnp.dtype) -> jnp.dtype:
    """Map a config name ("auto", "bf16", "f32", "int8", "fp8") to the page dtype."""
    table = {"bf16": jnp.bfloat16, "f32": jnp.float32, "int8": jnp.int8, "fp8": FP8_DTYPE}
    if kv_dtype == "auto":
        return jnp.dtype(compute_dtype)
    if kv_dtype not in table:
        raise ValueError(f"unknown kv_dtype {kv_dtype!r}; expected auto, {', '.join(table)}")
    return jnp.dtype(table[kv_dtype])


def container_dtype(storage_dtype: jnp.dtype) -> jnp.dtype:
    """The dtype pages are allocated in when bit containers are used (else unchanged)."""
    return jnp.dtype(BIT_CONTAINERS.get(jnp.dtype(storage_dtype), storage_dtype))


def logical_dtype(pages_dtype: jnp.dtype) -> jnp.dtype:
    """The value dtype held in pages of ``pages_dtype`` (uint16 -> bf16, uint8 -> fp8)."""
    return jnp.dtype(CONTAINED.get(jnp.dtype(pages_dtype), pages_dtype))


def to_container(x: jax.Array, pages_dtype: jnp.dtype) -> jax.Array:
    """Values in the pages' value dtype -> what pages of ``pages_dtype`` store (a bitcast
    for containers, else x itself)."""
    if x.dtype != jnp.dtype(pages_dtype):
        return jax.lax.bitcast_convert_type(x, pages_dtype)
    return x


def from_container(x: jax.Array, dtype: jnp.dtype | None = None) -> jax.Array:
    """Stored page values -> their values in ``dtype`` (None: the dtype x's own contains,
    uint16 -> bf16, uint8 -> fp8); a bitcast for containers, else x itself."""
    dtype = logical_dtype(x.dtype) if dtype is None else jnp.dtype(dtype)
    if x.dtype != dtype:
        return jax.lax.bitcast_convert_type(x, dtype)
    return x


def int8_scales_shape(num_pages: int, page_size: int, num_rows: int) -> tuple[int, int]:
    """An int8 cache's scales: [num_pages, page_size * num_rows rounded up to 128 lanes]."""
    return (num_pages, -(-page_size * num_rows // LANES) * LANES)


def _scale_index(slots: jax.Array, page_size: int, num_rows: int):
    """(page, lanes) of token slots i32[...]: i32[..., 1] and i32[..., num_rows]."""
    page, offset = slots // page_size, slots % page_size
    return page[..., None], offset[..., None] * num_rows + jnp.arange(num_rows)


def read_row_scales(scales: jax.Array, slots: jax.Array, page_size: int, num_rows: int):
    """int8 scales at token slots i32[...] -> f32[..., num_rows] (XLA's gather clamps)."""
    return scales[_scale_index(slots, page_size, num_rows)]


def write_row_scales(
    scales: jax.Array, slots: jax.Array, row_scales: jax.Array, page_size: int
) -> jax.Array:
    """int8 scales with row_scales f32[T, num_rows] set at token slots i32[T]."""
    page, lanes = _scale_index(slots, page_size, row_scales.shape[-1])
    return scales.at[page, lanes].set(row_scales.astype(scales.dtype))


def page_row_scales(page_scales: jax.Array, page_size: int, num_rows: int) -> jax.Array:
    """Rows of int8 scales f[..., scale_lanes] -> f[..., page_size, num_rows] (tokens)."""
    used = page_scales[..., : page_size * num_rows]
    return used.reshape(*page_scales.shape[:-1], page_size, num_rows)


def interleave_kv(k: jax.Array, v: jax.Array) -> jax.Array:
    """[T, H, D], [T, H, D] -> [T, 2H, D] with K at even rows and V at odd rows."""
    t, h, d = k.shape
    return jnp.stack([k, v], axis=2).reshape(t, 2 * h, d)


def split_kv(kv: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Inverse of ``interleave_kv`` on the second-to-last axis."""
    return kv[..., 0::2, :], kv[..., 1::2, :]


def quantize_int8(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """f[..., D] -> (i8[..., D], f32[...]) with a symmetric absmax scale per row."""
    x = x.astype(jnp.float32)
    scale = jnp.max(jnp.abs(x), axis=-1) / INT8_MAX
    scale = jnp.where(scale == 0.0, 1.0, scale)
    q = jnp.clip(jnp.round(x / scale[..., None]), -INT8_MAX, INT8_MAX).astype(jnp.int8)
    return q, scale


def quantize_int8_pages(values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """f[num_pages, page_size, 2H, D] -> (i8 pages, scales in ``int8_scales_shape``)."""
    num_pages, page_size, num_rows, _ = values.shape
    q, scale = quantize_int8(values)
    lanes = int8_scales_shape(num_pages, page_size, num_rows)[1]
    scale = scale.reshape(num_pages, page_size * num_rows)
    return q, jnp.pad(scale, ((0, 0), (0, lanes - page_size * num_rows)), constant_values=1.0)


def fp8_row_scales(scales: jax.Array, num_rows: int) -> jax.Array:
    """f32[2] (k_scale, v_scale) -> f32[num_rows] matching the interleaved head axis."""
    return jnp.tile(scales, num_rows // 2)


def quantize_rows(kv: jax.Array, scales: jax.Array | None, dtype: jnp.dtype):
    """Quantize interleaved new KV rows f[T, 2H, D] into the page format.

    Returns (stored f[T, 2H, D] in ``dtype``, per-row scales f32[T, 2H] or None).
    """
    if dtype == jnp.int8:
        return quantize_int8(kv)
    if dtype == FP8_DTYPE:
        row_scale = fp8_row_scales(scales, kv.shape[1])[None, :, None]
        q = jnp.clip(kv.astype(jnp.float32) / row_scale, -FP8_MAX, FP8_MAX).astype(dtype)
        return q, None
    return kv.astype(dtype), None


def dequantize_rows(stored: jax.Array, row_scales: jax.Array | None, out_dtype) -> jax.Array:
    """stored [..., 2H, D] with row_scales broadcastable to [..., 2H] -> float values."""
    if row_scales is None:
        return stored.astype(out_dtype)
    return (stored.astype(jnp.float32) * row_scales[..., None]).astype(out_dtype)
