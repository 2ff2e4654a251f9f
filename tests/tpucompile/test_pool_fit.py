"""The KV pool sized from a chip's HBM (hbm_utilization), as vLLM's gpu_memory_utilization."""

from __future__ import annotations

import pytest

from claimbench.engine.config import EngineConfig
from claimbench.harness.context import RunContext
from claimbench.tpucompile import check as tpu_check
from claimbench.tpucompile.pool_fit import fit_pool, pool_bounds, size_pool

GB = 10**9


def test_the_pool_fills_what_the_fraction_leaves_capped_at_what_the_engine_can_use() -> None:
    roomy = fit_pool(32 * GB, 0.9, 20 * GB, min_bytes=GB, need_bytes=4 * GB)
    assert roomy.pool_bytes == 4 * GB and roomy.fits  # 8.8 GB free: capped at the need
    tight = fit_pool(24 * GB, 0.9, 20 * GB, min_bytes=GB, need_bytes=4 * GB)
    assert tight.pool_bytes == int(24 * GB * 0.9) - 20 * GB and tight.fits  # 1.6 GB
    # Less HBM, a smaller pool; too little for one sequence: does not fit, sizes named.
    over = fit_pool(16 * GB, 0.9, 15 * GB, min_bytes=GB, need_bytes=4 * GB)
    assert over.pool_bytes == 0 and not over.fits
    assert over.describe().startswith("does not fit HBM: a one-sequence KV pool needs 1.00 GB")
    assert "15.00 GB weights and step resident" in over.describe()
    for bad in (0, 1.5, True, "0.9"):
        with pytest.raises(ValueError, match="hbm_utilization"):
            fit_pool(GB, bad, 0, 1, 1)


def test_bounds_are_one_sequence_and_every_slot_at_max_model_len() -> None:
    _, cfg = tpu_check.resolve_model("qwen2.5-7b-instruct")
    engine = EngineConfig(max_num_seqs=64, max_model_len=1025, page_size=16)
    low, high = pool_bounds(cfg, engine)
    per_page = 16 * 2 * 28 * 4 * 128 * 2  # tokens x K,V x layers x KV heads x head_dim x bf16
    assert (low, high) == ((1 + 65) * per_page, (1 + 64 * 65) * per_page)
    with pytest.raises(ValueError, match="tp must be 1"):
        pool_bounds(cfg, EngineConfig(tp=2))


@pytest.mark.slow
def test_off_a_tpu_the_engine_factory_refuses_in_one_line() -> None:
    ctx = RunContext(
        "c", "full", {"engine": {"hbm_utilization": 0.9}}, 1, 0, {"platform": "cpu"}, "bfloat16"
    )
    with pytest.raises(
        ValueError, match="sizes the KV pool from a TPU chip's HBM; this run is on cpu"
    ):
        ctx.engine()


@pytest.mark.slow
@pytest.mark.skipif(tpu_check.libtpu_unavailable() is not None, reason="libtpu not installed")
def test_sized_on_a_described_chip_the_pool_compiles_within_the_fraction() -> None:
    name, cfg = tpu_check.resolve_model("claimbench-tiny")
    engine = EngineConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256)
    low, high = pool_bounds(cfg, engine)
    full = size_pool("v5e", cfg, engine, 0.9)
    assert full.pool_bytes == high  # a tiny model on 16 GB: every slot's pages
    # An HBM that leaves room for half the pages: the pool shrinks to what is left.
    hbm = int((full.resident_bytes + (low + high) // 2) / 0.9)
    half = size_pool("v5e", cfg, engine, 0.9, hbm_bytes=hbm)
    assert half.resident_bytes == full.resident_bytes and low < half.pool_bytes < high
    sized = EngineConfig(**{**engine.__dict__, "kv_pool_bytes": half.pool_bytes})
    (bucket,) = tpu_check.check("v5e", cfg, sized, model_name=name, buckets=[(64, 8)]).buckets
    # The compiled step fills the fraction (to its layout's few KB) and stays inside the HBM.
    assert bucket.ok and abs(bucket.total_bytes - int(hbm * 0.9)) < 0.005 * hbm
    assert bucket.total_bytes < hbm
