"""KV-cache sizing and allocation: exact bytes per token, per page, per pool.

Per layer the cache is ``LayerKV(pages [num_pages, page_size, 2 * num_kv_heads,
head_dim], scales)`` (kernels/kv_quant.py). int8 adds one f32 scale per token and
K/V head row; fp8 one f32 (k, v) pair per layer, a fixed cost outside the pages.
Sizing and allocation read the layout from a ModelConfig whose head_dim is the pages' last
axis: ``page_layout`` gives it per attention backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from claimbench.engine.config import CacheConfig, ModelOptions
from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    LayerKV,
    int8_scales_shape,
    kv_container_dtype,
    kv_storage_dtype,
)
from claimbench.models.config import ModelConfig

SCALE_BYTES = 4  # f32


def page_layout(cfg: ModelConfig, attention_backend: str) -> ModelConfig:
    """``cfg`` with head_dim as the pages store it for a resolved backend name: padded to
    whole 128-lane tiles for "pallas" (on TPU a 64-wide row-major page would be relaid out,
    whole cache, every step: pallas_rpa.page_head_dim), the model's elsewhere."""
    if attention_backend != "pallas":
        return cfg
    from claimbench.kernels.pallas_rpa import page_head_dim

    return dataclasses.replace(cfg, head_dim=page_head_dim(cfg.head_dim))


def kv_bytes_per_token(cfg: ModelConfig, storage_dtype: jnp.dtype) -> int:
    """Bytes one token's K and V occupy across all layers, int8 scales included."""
    rows = 2 * cfg.num_kv_heads
    per_layer = rows * cfg.head_dim * jnp.dtype(storage_dtype).itemsize
    if jnp.dtype(storage_dtype) == jnp.int8:
        per_layer += rows * SCALE_BYTES
    return cfg.num_layers * per_layer


def kv_fixed_bytes(cfg: ModelConfig, storage_dtype: jnp.dtype) -> int:
    """Bytes outside the pages: fp8's per-layer (k_scale, v_scale)."""
    return cfg.num_layers * 2 * SCALE_BYTES if jnp.dtype(storage_dtype) == FP8_DTYPE else 0


def kv_bytes_per_page(cfg: ModelConfig, storage_dtype: jnp.dtype, page_size: int) -> int:
    """Bytes one page occupies across all layers: its tokens' K and V, and for int8 its row
    of scales, which is padded to whole 128-lane tiles (kv_quant.int8_scales_shape)."""
    page_bytes = page_size * kv_bytes_per_token(cfg, storage_dtype)
    if jnp.dtype(storage_dtype) == jnp.int8:
        rows = 2 * cfg.num_kv_heads
        padding = int8_scales_shape(1, page_size, rows)[1] - page_size * rows
        page_bytes += cfg.num_layers * padding * SCALE_BYTES
    return page_bytes


def num_pages_for_pool(
    cfg: ModelConfig, storage_dtype: jnp.dtype, page_size: int, pool_bytes: int
) -> int:
    """Pages (null page included) that fit in pool_bytes; ValueError below two."""
    page_bytes = kv_bytes_per_page(cfg, storage_dtype, page_size)
    num_pages = (pool_bytes - kv_fixed_bytes(cfg, storage_dtype)) // page_bytes
    if num_pages < 2:
        raise ValueError(
            f"kv_pool_bytes={pool_bytes} holds {max(num_pages, 0)} pages of {page_bytes} bytes; "
            "need >= 2 (one is the null page)"
        )
    return int(num_pages)


def pool_bytes(cfg: ModelConfig, storage_dtype: jnp.dtype, page_size: int, num_pages: int) -> int:
    """Exact bytes of a pool of num_pages pages (what ``allocate_kv_cache`` allocates)."""
    page_bytes = kv_bytes_per_page(cfg, storage_dtype, page_size)
    return num_pages * page_bytes + kv_fixed_bytes(cfg, storage_dtype)


def pool_bytes_for(cfg: ModelConfig, options: Mapping[str, Any], num_usable_pages: int) -> int:
    """kv_pool_bytes that holds exactly ``num_usable_pages`` pages of ``cfg`` plus the null
    page, in the KV storage and page size ``options`` (EngineConfig keyword arguments) name:
    their dtype, kv_dtype and page_size, EngineConfig's defaults where absent. The one pool
    sizing the experiments, their helpers and tpu-check share, so a pool an experiment builds
    and the one tpu-check compiles for it are the same bytes in every KV format."""
    if num_usable_pages < 1:
        raise ValueError(f"num_usable_pages must be >= 1, got {num_usable_pages}")
    storage = resolve_kv_dtype(
        options.get("kv_dtype", CacheConfig.kv_dtype), options.get("dtype", ModelOptions.dtype)
    )
    page_size = int(options.get("page_size", CacheConfig.page_size))
    return pool_bytes(cfg, storage, page_size, num_usable_pages + 1)


def max_concurrent_sequences(num_usable_pages: int, page_size: int, seq_len: int) -> int:
    """Sequences of seq_len tokens whose KV fits at once in num_usable_pages."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    return num_usable_pages // -(-seq_len // page_size)


def resolve_kv_dtype(kv_dtype: str, compute_dtype: str) -> jnp.dtype:
    """Config names ("auto" | "bf16" | ..., "bfloat16" | "float32") -> the page dtype."""
    return kv_storage_dtype(kv_dtype, jnp.dtype(compute_dtype))


def allocate_kv_cache(
    cfg: ModelConfig,
    num_pages: int,
    page_size: int,
    storage_dtype: jnp.dtype,
    fp8_scales: tuple[float, float] = (1.0, 1.0),
    attention_backend: str | None = None,
) -> list[LayerKV]:
    """One zeroed LayerKV per layer; int8 scales start at 1, fp8 tensor scales at fp8_scales
    (k_scale, v_scale), the same for every layer. Pages are in the container dtype the
    resolved ``attention_backend`` reads (kv_quant.kv_container_dtype: bf16/fp8 bits in
    unsigned ints for "xla" and "cpu", f16 bits in bf16 for "pallas"); None: in
    ``storage_dtype`` itself. Containers take the same bytes as the values."""
    storage_dtype = jnp.dtype(storage_dtype)
    page_dtype = storage_dtype
    if attention_backend is not None:
        page_dtype = kv_container_dtype(storage_dtype, attention_backend)
    f16_bits = storage_dtype == jnp.float16 and page_dtype != storage_dtype
    shape = (num_pages, page_size, 2 * cfg.num_kv_heads, cfg.head_dim)
    caches = []
    for _ in range(cfg.num_layers):
        if storage_dtype == jnp.int8:
            scales = jnp.ones(int8_scales_shape(num_pages, page_size, shape[2]), jnp.float32)
        elif storage_dtype == FP8_DTYPE:
            scales = jnp.asarray(fp8_scales, jnp.float32)
        else:
            scales = None
        caches.append(LayerKV(jnp.zeros(shape, page_dtype), scales, f16_bits))
    return caches
