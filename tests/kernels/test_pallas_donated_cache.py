"""The Pallas kernel's public wrapper inside a caller's jit with the cache donated, compiled
ahead of time for TPU chips through libtpu on this CPU host (tpu-check's path: a described
topology's device, shapes only, Mosaic compiling the kernel), at every page dtype and at the
layer shapes of the shipped model, Llama-3-8B and Qwen2.5-7B.

Each caller returns just (out, cache), the shape of result that made XLA:TPU reject bf16
pages of a 128-wide head_dim ("Different aliasing shapes ... S(9)": pallas_rpa's guard
output). Skipped where libtpu is not installed; under CI, which installs the tpu extra, a
missing libtpu fails instead. A cache in host memory is refused before anything compiles.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import SingleDeviceSharding

from claimbench.kernels.kv_quant import FP8_DTYPE, LayerKV, int8_scales_shape
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.pallas_rpa import (
    check_device_memory,
    page_head_dim,
    ragged_paged_attention,
)
from claimbench.tpucompile import check as tpu_check
from claimbench.tpucompile.hlo_copies import count_full_copies, hlo_shape

# One step of the full profile's largest bucket: 256 tokens over 32 sequences, a pool of
# 2,048 pages of 16 tokens, block tables of 64 pages (1,024 tokens) per sequence.
NUM_TOKENS, NUM_SEQS, PAGE_SIZE, NUM_PAGES, PAGES_PER_SEQ = 256, 32, 16, 2048, 64
# The shipped model (4 query heads, 2 KV heads, head_dim 64: pages padded to 128 lanes),
# Llama-3-8B's layer (32, 8, 128) and Qwen2.5-7B's (28, 4, 128).
MODELS = ("claimbench-tiny", "llama-3.1-8b", "qwen2.5-7b-instruct")
PAGE_DTYPES = {"bf16": jnp.dtype(jnp.bfloat16), "int8": jnp.dtype(jnp.int8), "fp8": FP8_DTYPE}


def _require_libtpu() -> None:
    reason = tpu_check.libtpu_unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI installs the tpu extra, so these compiles must run there")
    pytest.skip(reason)


def _compile(chip: str, model: str, page_dtype: str, *, donate: bool) -> tuple[object, LayerKV]:
    """(the compiled caller, its cache argument) for one chip, model shape and page dtype."""
    device = tpu_check.tpu_devices(chip)[0]
    placed = SingleDeviceSharding(device)

    def shape(dims: tuple[int, ...], dtype: jnp.dtype) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(dims, dtype, sharding=placed)

    cfg = tpu_check.resolve_model(model)[1]
    num_rows, dtype = 2 * cfg.num_kv_heads, PAGE_DTYPES[page_dtype]
    scales = None
    if page_dtype == "int8":
        scales = shape(int8_scales_shape(NUM_PAGES, PAGE_SIZE, num_rows), jnp.float32)
    elif page_dtype == "fp8":
        scales = shape((2,), jnp.float32)
    pages = shape((NUM_PAGES, PAGE_SIZE, num_rows, page_head_dim(cfg.head_dim)), dtype)
    cache = LayerKV(pages, scales)
    i32 = jnp.int32
    md = AttentionMetadata(
        slot_mapping=shape((NUM_TOKENS,), i32),
        cu_q_lens=shape((NUM_SEQS + 1,), i32),
        kv_lens=shape((NUM_SEQS,), i32),
        page_indices=shape((NUM_SEQS, PAGES_PER_SEQ), i32),
        num_seqs=shape((1,), i32),
        distribution=shape((3,), i32),
    )
    q = shape((NUM_TOKENS, cfg.num_heads, cfg.head_dim), jnp.bfloat16)
    kv = shape((NUM_TOKENS, cfg.num_kv_heads, cfg.head_dim), jnp.bfloat16)

    def attend(q, k, v, cache, md):
        return ragged_paged_attention(
            q, k, v, cache, md, sm_scale=cfg.head_dim**-0.5, interpret=False, generation=chip
        )

    step = jax.jit(attend, donate_argnums=(3,) if donate else ())
    # Mosaic reads the target chip from the default device, as tpu-check's compiles do.
    with jax.default_device(device):
        return step.lower(q, kv, kv, cache, md).compile(), cache


def _cache_facts(compiled, cache: LayerKV) -> tuple[int, int, int]:
    """(whole-cache copies in the program, bytes aliased in place, bytes of the pages)."""
    shapes = [hlo_shape(x.dtype.name, x.shape) for x in jax.tree.leaves(cache) if x.ndim >= 2]
    copies = count_full_copies(compiled.as_text(), shapes)
    aliased = compiled.memory_analysis().alias_size_in_bytes
    return copies, aliased, cache.pages.size * cache.pages.dtype.itemsize


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("page_dtype", PAGE_DTYPES)
@pytest.mark.parametrize("chip", tpu_check.TPU_CHIPS)
def test_donated_cache_compiles_and_is_updated_in_place(
    chip: str, page_dtype: str, model: str
) -> None:
    _require_libtpu()
    compiled, cache = _compile(chip, model, page_dtype, donate=True)
    copies, aliased, pages_bytes = _cache_facts(compiled, cache)
    assert copies == 0
    # The donated pages are the output pages: no second pool.
    assert aliased >= pages_bytes


@pytest.mark.slow
def test_an_undonated_cache_is_copied_which_the_checks_see() -> None:
    # The control: without donation the result is a new pool, written by a copy of the
    # pages, so the two checks above can fail.
    _require_libtpu()
    compiled, cache = _compile("v6e", "claimbench-tiny", "bf16", donate=False)
    copies, aliased, pages_bytes = _cache_facts(compiled, cache)
    assert copies >= 1
    assert aliased < pages_bytes


def test_a_cache_in_host_memory_is_refused_outside_jit() -> None:
    # Compiled for TPU, a donated host-memory cache aborts libtpu; outside jit its memory
    # kind is known, so the wrapper names it before anything compiles.
    device = jax.devices("cpu")[0]
    num_tokens, num_seqs, head_dim = 8, 2, 64
    pages = jnp.zeros((4, 16, 4, page_head_dim(head_dim)), jnp.bfloat16)
    host = SingleDeviceSharding(device, memory_kind="pinned_host")
    q = jnp.zeros((num_tokens, 4, head_dim), jnp.bfloat16)
    kv = jnp.zeros((num_tokens, 2, head_dim), jnp.bfloat16)
    md = AttentionMetadata(
        slot_mapping=jnp.zeros((num_tokens,), jnp.int32),
        cu_q_lens=jnp.zeros((num_seqs + 1,), jnp.int32),
        kv_lens=jnp.zeros((num_seqs,), jnp.int32),
        page_indices=jnp.zeros((num_seqs, 2), jnp.int32),
        num_seqs=jnp.zeros((1,), jnp.int32),
        distribution=jnp.zeros((3,), jnp.int32),
    )
    in_host = LayerKV(jax.device_put(pages, host), None)
    with pytest.raises(ValueError, match="cache.pages is in 'pinned_host' memory"):
        ragged_paged_attention(q, kv, kv, in_host, md, sm_scale=0.125)
    check_device_memory(LayerKV(jax.device_put(pages, device), None))  # device memory: fine
