"""Capacity measured on the engine's pool, and the fp8 KV scale configuration."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import TINY_MODEL, tiny_engine

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv_cache import kv_bytes_per_token
from claimbench.harness.capacity import fill_capacity
from claimbench.kernels.kv_quant import FP8_DTYPE


def test_capacity_follows_real_bytes_per_token():
    # TINY_MODEL: 2 layers x 4 K/V rows x 16 dims. f32 stores 4 * 64 = 256 bytes per layer
    # per token: 512 B/token, 4 KiB per 8-token page. int8 stores 64 B of values plus
    # 4 * 4 B of scales per layer: 160 B/token, 1280 B per page.
    pool = 100 * 4096 + 100  # 100 f32 pages (null page included), and change
    assert kv_bytes_per_token(TINY_MODEL, jnp.float32) == 512
    assert kv_bytes_per_token(TINY_MODEL, jnp.int8) == 160
    f32 = tiny_engine(prefix_caching="off", kv_pool_bytes=pool)
    int8 = tiny_engine(prefix_caching="off", kv_pool_bytes=pool, kv_dtype="int8")
    # 99 usable f32 pages; 20-token sequences take 3 pages: 33 of them.
    assert fill_capacity(f32, 20) == 33
    # 409600 + 100 bytes // 1280 = 320 pages, 319 usable: 106 sequences.
    assert fill_capacity(int8, 20) == 106
    assert f32.block_manager.num_used_pages == 0  # every page given back
    assert fill_capacity(f32, 20) == 33
    with pytest.raises(ValueError, match="prefix_caching"):
        fill_capacity(tiny_engine(kv_pool_bytes=pool), 20)


def test_fp8_scale_number_or_calibration():
    engine = tiny_engine(prefix_caching="off", kv_dtype="fp8", kv_scale="0.5")
    assert engine.runner.kv_dtype == FP8_DTYPE
    for cache in engine.runner.kv_caches:
        np.testing.assert_array_equal(cache.scales, [0.5, 0.5])
    with pytest.raises(ValueError, match="tokenizer"):
        tiny_engine(kv_dtype="fp8", kv_scale="calibrate")  # a random model has no tokenizer
    for bad in ("0", "-1", "calibrated", "nan"):
        with pytest.raises(ValueError, match="kv_scale"):
            EngineConfig(kv_scale=bad)
    with pytest.raises(ValueError, match="weights"):
        EngineConfig(weights="int4")
