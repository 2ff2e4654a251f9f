"""tpu-check: the copy counter on hand-made HLO, and the engine step compiled for TPU chips
through libtpu on this CPU host (skipped, with the reason, where libtpu is not installed;
CI installs the `tpu` extra)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.engine.config import EngineConfig
from claimbench.tpucompile import check as tpu_check
from claimbench.tpucompile.hlo_collectives import count_collectives
from claimbench.tpucompile.hlo_copies import count_full_copies, hlo_shape
from claimbench.tpucompile.target import build_target

CACHE = ("bf16", (8192, 16, 4, 64))

# Trimmed from the step compiled for v6e before pages were lane-padded: the page axis is
# minor in the parameter's layout and row-major at the kernel, so XLA copies the whole
# cache in (copy.56) and out (copy.72); a small activation copy and an async copy-start /
# copy-done pair of the cache (counted once) sit beside them.
HLO_WITH_COPIES = """\
ENTRY %main {
  %kv_caches_0__pages.1 = bf16[8192,16,4,64]{0,3,2,1:T(8,128)(2,1)} parameter(4)
  %copy.55 = bf16[16,2,2,64]{3,2,1,0:T(2,128)(2,1)S(1)} copy(%pad_maximum_fusion.1)
  %copy.56 = bf16[8192,16,4,64]{3,2,1,0:T(4,128)(2,1)} copy(%kv_caches_0__pages.1)
  %call = (bf16[16,4,64]{2,1,0}, bf16[8192,16,4,64]{3,2,1,0:T(4,128)(2,1)}) custom-call(%copy.56)
  %copy.72 = bf16[8192,16,4,64]{0,3,2,1:T(8,128)(2,1)} copy(%get-tuple-element.24)
  %copy-start.1 = (bf16[8192,16,4,64]{3,2,1,0}, bf16[8192,16,4,64]{3,2,1,0:S(1)}) copy-start(%g)
  %copy-done.1 = bf16[8192,16,4,64]{3,2,1,0} copy-done(%copy-start.1)
}
"""


def test_copy_counter_finds_the_whole_cache_copies() -> None:
    # copy.56 + copy.72 + copy-start.1; copy.55 is another shape, copy-done ends copy-start.
    assert count_full_copies(HLO_WITH_COPIES, [CACHE]) == 3
    assert count_full_copies(HLO_WITH_COPIES, [("bf16", (8192, 16, 4, 128))]) == 0
    assert count_full_copies(HLO_WITH_COPIES, [("f32", CACHE[1])]) == 0
    no_copy = HLO_WITH_COPIES.replace(" copy(", " negate(").replace("copy-start(", "add(")
    assert count_full_copies(no_copy, [CACHE]) == 0
    # XLA:TPU runs a bitcast-convert as a pass over the array (the kernel's old f16 path).
    bitcast = no_copy.replace(" negate(%get", " bitcast-convert(%get")
    assert count_full_copies(bitcast, [CACHE]) == 1


def test_hlo_shape_spells_dtypes_as_hlo_does() -> None:
    assert hlo_shape("bfloat16", (2, 3)) == ("bf16", (2, 3))
    assert hlo_shape("int8", (4,)) == ("s8", (4,))


def test_parse_buckets() -> None:
    assert tpu_check.parse_buckets("16x8, 512x32") == [(16, 8), (512, 32)]
    for bad in ("16", "8x16", "ax8", "16x8,"):
        with pytest.raises(ValueError, match="TOKENSxSEQS"):
            tpu_check.parse_buckets(bad)


def test_cli_bad_buckets_are_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(app, ["tpu-check", "--chip", "v6e", "--buckets", "8x16"])
    assert result.exit_code == 2
    assert "TOKENSxSEQS" in result.output and len(result.output.strip().splitlines()) == 1


needs_libtpu = pytest.mark.skipif(
    tpu_check.libtpu_unavailable() is not None,
    reason=f"{tpu_check.libtpu_unavailable()}: install the tpu extra to compile for TPU",
)


@pytest.mark.slow
@needs_libtpu
def test_cli_compiles_the_shipped_model_for_v5e_without_copies() -> None:
    result = CliRunner().invoke(app, ["tpu-check", "--chip", "v5e", "--buckets", "16x8", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    (bucket,) = report["buckets"]
    assert report["ok"] and bucket["error"] is None
    assert bucket["full_cache_copies"] == 0
    assert bucket["compile_s"] > 0
    # Weights + pool fit a 16 GB v5e with room; the step reads little beyond the ideal.
    assert bucket["kv_pool_bytes"] <= bucket["total_bytes"] < bucket["hbm_bytes"]
    assert bucket["bytes_over_ideal"] < 2.0


@pytest.mark.slow
@needs_libtpu
def test_v6e_head_dim_64_pages_alias_in_place() -> None:
    # The shipped engine config as is. Before lane-padded pages this bucket copied each of the
    # 4 layers' caches in and out (8 copies, 140 MB of temporaries); with padded pages left to
    # XLA's placement, v6e's VMEM took the last layer's 64 MB cache whole and wrote it back
    # (1 copy): the kernel now pins the pages to HBM.
    name, model_cfg = tpu_check.resolve_model("claimbench-tiny")
    assert model_cfg.head_dim == 64
    report = tpu_check.check("v6e", model_cfg, EngineConfig(), model_name=name, buckets=[(16, 8)])
    (bucket,) = report.buckets
    assert bucket.ok, bucket.error
    assert bucket.full_cache_copies == 0
    assert bucket.temp_bytes < 16 * 2**20
    assert bucket.bytes_over_ideal < 2.0


@pytest.mark.slow
@needs_libtpu
def test_v6e_f16_pages_alias_in_place() -> None:
    # Mosaic takes no f16: the pool was f16 and bitcast to bf16 and back around the kernel,
    # each bitcast-convert a pass over a layer's whole cache (and bf16-not-fp16's small pool
    # was staged through VMEM: 7 copies a step). The pool is now allocated as bf16 containers
    # of the f16 bits (kv_quant.kv_container_dtype) and aliased in place.
    name, model_cfg = tpu_check.resolve_model("claimbench-tiny")
    engine_cfg = dataclasses.replace(EngineConfig(), dtype="float16")
    report = tpu_check.check("v6e", model_cfg, engine_cfg, model_name=name, buckets=[(16, 8)])
    (bucket,) = report.buckets
    assert report.kv_dtype == "float16"
    assert bucket.ok, bucket.error
    assert bucket.full_cache_copies == 0


@pytest.mark.slow
@needs_libtpu
def test_a_pool_larger_than_hbm_is_an_error_naming_the_sizes() -> None:
    name, model_cfg = tpu_check.resolve_model("claimbench-tiny")
    engine_cfg = dataclasses.replace(EngineConfig(), kv_pool_bytes=20 * 2**30)
    report = tpu_check.check("v5e", model_cfg, engine_cfg, model_name=name, buckets=[(16, 8)])
    (bucket,) = report.buckets
    assert not report.ok
    # The compiler refuses it; the line names the sizes either way.
    assert "does not fit HBM" in bucket.error and "KV pool 21.47 GB" in bucket.error
    assert "16.0 GB" in bucket.error


@pytest.mark.slow
@needs_libtpu
def test_v6e_quantized_weights_and_fp8_pages_compile_without_copies() -> None:
    name, model_cfg = tpu_check.resolve_model("claimbench-tiny")
    engine_cfg = dataclasses.replace(EngineConfig(), weights="int8", kv_dtype="fp8")
    report = tpu_check.check("v6e", model_cfg, engine_cfg, model_name=name, buckets=[(16, 8)])
    (bucket,) = report.buckets
    assert report.kv_dtype == "float8_e4m3fn"
    assert bucket.ok, bucket.error


@pytest.mark.slow
@needs_libtpu
def test_v6e_int8_pages_compile_without_copies() -> None:
    # int8's per-row scales were f32[pages, page_size, 4]: TPU laid them out page-axis-minor
    # and relaid each layer's out and back around the kernel (11 copies a step). Rows of
    # whole 128-lane tiles, touched only by DMA, keep their layout and stay in HBM.
    name, model_cfg = tpu_check.resolve_model("claimbench-tiny")
    engine_cfg = dataclasses.replace(EngineConfig(), kv_dtype="int8")
    report = tpu_check.check("v6e", model_cfg, engine_cfg, model_name=name, buckets=[(16, 8)])
    (bucket,) = report.buckets
    assert report.kv_dtype == "int8"
    assert bucket.ok, bucket.error
    assert bucket.full_cache_copies == 0


# Trimmed from the shipped model's step compiled for 4 v6e chips: the two all-reduces a
# layer runs (one a combined pair), an async all-gather and a collective-permute whose
# results are (operand, result, context).
HLO_WITH_COLLECTIVES = """\
ENTRY %main {
  %all-reduce.1 = bf16[16,256]{1,0} all-reduce(%dot.1), replica_groups={{0,1,2,3}}
  %all-reduce.2 = (bf16[16,256]{1,0}, f32[16]{0}) all-reduce(%dot.2, %r), to_apply=%add
  %all-reduce-start.3 = f32[8,1024]{1,0} all-reduce-start(%x), to_apply=%add
  %all-reduce-done.3 = f32[8,1024]{1,0} all-reduce-done(%all-reduce-start.3)
  %all-gather-start.1 = (bf16[4,64]{1,0}, bf16[16,64]{1,0}) all-gather-start(%y), dimensions={0}
  %all-gather-done.1 = bf16[16,64]{1,0} all-gather-done(%all-gather-start.1)
  %collective-permute-start.1 = (s32[8]{0}, s32[8]{0}, u32[], u32[]) collective-permute-start(%z)
  %collective-permute-done.1 = s32[8]{0} collective-permute-done(%collective-permute-start.1)
  %fusion.4 = bf16[16,256]{1,0} fusion(%all-reduce.1), kind=kLoop, calls=%fused
}
"""


def test_collective_counter_counts_each_op_once_with_its_result_bytes() -> None:
    found = count_collectives(HLO_WITH_COLLECTIVES)
    # 16 * 256 * 2 bytes; the pair 16 * 256 * 2 + 16 * 4; the async 8 * 1024 * 4.
    assert found["all-reduce"] == {"count": 3, "bytes": 8192 + 8192 + 64 + 32768}
    # The gathered result, 16 * 64 * 2, not the operand.
    assert found["all-gather"] == {"count": 1, "bytes": 2048}
    assert found["collective-permute"] == {"count": 1, "bytes": 32}
    assert "reduce-scatter" not in found and "all-to-all" not in found
    assert count_collectives(HLO_WITH_COPIES) == {}


def test_cli_tp_that_cannot_split_the_model_is_one_line_and_exit_2() -> None:
    for tp, problem in (("3", "does not divide the model's 4 query heads"), ("8", "exceeds")):
        result = CliRunner().invoke(app, ["tpu-check", "--chip", "v6e", "--tp", tp])
        assert result.exit_code == 2
        assert problem in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
@needs_libtpu
def test_cli_compiles_the_sharded_step_over_four_v6e_chips() -> None:
    # The shipped model (4 query heads, 2 KV heads) over the 4 chips of a v6e:2x2: each KV
    # head replicated twice, one per chip; q/k/v/gate/up column-split, o/down row-split.
    result = CliRunner().invoke(
        app, ["tpu-check", "--chip", "v6e", "--tp", "4", "--buckets", "16x8", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    (bucket,) = report["buckets"]
    assert report["tp"] == 4 and report["ok"], bucket["error"]
    assert bucket["full_cache_copies"] == 0
    # Megatron's two all-reduces per layer and nothing else: the tied vocabulary projection
    # is replicated, so no gather of logits, weights or pages.
    num_layers = tpu_check.resolve_model("claimbench-tiny")[1].num_layers
    assert bucket["collectives"] == {
        "all-reduce": {"count": 2 * num_layers, "bytes": 2 * num_layers * 16 * 256 * 2}
    }
    # One chip holds a quarter of each split matrix: under half the unsharded weights.
    name, model_cfg = tpu_check.resolve_model("claimbench-tiny")
    whole = build_target("v6e", model_cfg, EngineConfig(), tpu_check.tpu_devices("v6e", 1))
    assert bucket["weight_bytes"] < whole.weight_bytes / 2
    assert bucket["kv_pool_bytes"] <= bucket["total_bytes"] < bucket["hbm_bytes"]


@pytest.mark.slow
@needs_libtpu
def test_the_shipped_moe_compiles_for_v6e_through_ragged_dot() -> None:
    # models/moe.py's grouped matmul (ragged_dot over tokens sorted by expert) lowers to a
    # Mosaic fusion on TPU; the engine step around it copies no cache.
    name, model_cfg = tpu_check.resolve_model("claimbench-tiny-moe")
    assert model_cfg.is_moe
    report = tpu_check.check("v6e", model_cfg, EngineConfig(), model_name=name, buckets=[(16, 8)])
    (bucket,) = report.buckets
    assert bucket.ok, bucket.error
    assert bucket.full_cache_copies == 0 and bucket.collectives == {}
