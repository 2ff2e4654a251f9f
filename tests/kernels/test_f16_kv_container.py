"""f16 KV on the Pallas path: the pool itself is bf16-typed containers of f16 bits.

Mosaic takes no f16 arrays, and bitcasting a whole f16 pool to bf16 per call copied the
cache on v6e (kv_quant.F16_CONTAINER), so ``allocate_kv_cache(..., attention_backend=
"pallas")`` allocates f16 pools as bf16 marked ``f16_bits``. These tests check that
convention end to end: the allocation, the kernel (TPU interpret mode) against the XLA path
over a real f16 pool, bit for bit in the cache, and the engine on both backends.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import TINY_MODEL, tiny_engine
from flax import nnx
from test_ragged_paged_attention import (
    INTERPRET,
    as_f32,
    kernel_cache,
    make_step,
    num_real_tokens,
    xla_step,
)

from claimbench.engine.kv.kv_cache import allocate_kv_cache, page_layout, pool_bytes
from claimbench.engine.sampling_params import SamplingParams
from claimbench.kernels.kv_quant import (
    F16_CONTAINER,
    LayerKV,
    from_container,
    kv_container_dtype,
    value_dtype,
)
from claimbench.kernels.paged_io import gather_sequences, write_kv
from claimbench.kernels.pallas_rpa import ragged_paged_attention
from claimbench.models.llama import LlamaForCausalLM

F16 = jnp.dtype(jnp.float16)


def f16_values(cache: LayerKV) -> np.ndarray:
    """The f16 values a pool holds, container or not, as f16 bits (uint16) for exact compares."""
    return np.asarray(from_container(cache.pages, value_dtype(cache))).view(np.uint16)


def test_container_dtype_per_backend():
    assert kv_container_dtype(F16, "pallas") == F16_CONTAINER
    assert kv_container_dtype(jnp.bfloat16, "pallas") == jnp.bfloat16  # bf16 values as is
    assert kv_container_dtype(F16, "xla") == F16  # XLA handles f16 natively
    assert kv_container_dtype(jnp.bfloat16, "xla") == jnp.uint16  # its own bit containers
    assert kv_container_dtype(F16, "cpu") == F16


def test_pallas_f16_pool_is_bf16_marked_and_takes_the_same_bytes():
    cfg = page_layout(TINY_MODEL, "pallas")
    caches = allocate_kv_cache(cfg, 5, 8, F16, attention_backend="pallas")
    assert all(c.pages.dtype == F16_CONTAINER and c.f16_bits for c in caches)
    assert sum(c.pages.nbytes for c in caches) == pool_bytes(cfg, F16, 8, 5)
    bf16 = allocate_kv_cache(cfg, 5, 8, jnp.bfloat16, attention_backend="pallas")
    assert not any(c.f16_bits for c in bf16)  # same dtype, but bf16 values
    xla = allocate_kv_cache(TINY_MODEL, 5, 8, F16, attention_backend="xla")
    assert all(c.pages.dtype == F16 and not c.f16_bits for c in xla)


@pytest.mark.slow
def test_kernel_on_container_pool_matches_xla_on_f16_pool():
    q, k, v, cache, md = make_step(
        3, decode=[21, 3], prefill=[9], mixed=[(7, 30)], page_size=16, num_q_heads=4,
        num_kv_heads=2, head_dim=64, kv="f16", pad_seqs=1, pad_tokens=2,
    )  # fmt: skip
    options = dict(sm_scale=0.125, soft_cap=20.0)
    out, new_cache = ragged_paged_attention(
        q, k, v, kernel_cache(cache), md, **options, num_kv_pages_per_block=1,
        num_queries_per_block=8, interpret=INTERPRET,
    )  # fmt: skip
    xla_out, xla_cache = xla_step(q, k, v, cache, md, **options)
    # The pool stays a marked bf16 container (no f16 array crosses the kernel boundary).
    assert new_cache.pages.dtype == F16_CONTAINER and new_cache.f16_bits
    assert out.dtype == F16
    num_tokens = num_real_tokens(md)
    np.testing.assert_allclose(
        as_f32(out[:num_tokens]), as_f32(xla_out[:num_tokens]), atol=2e-3, rtol=2e-3
    )
    # Bitcast back, the real pages hold exactly the f16 values XLA wrote (page 0 is the
    # null page, written by padding); and the step did write some.
    got, want = f16_values(new_cache)[1:], f16_values(xla_cache)[1:]
    np.testing.assert_array_equal(got, want)
    assert np.any(want != f16_values(cache)[1:])


def test_kernel_rejects_a_raw_f16_pool():
    q, k, v, cache, md = make_step(
        5, decode=[4], prefill=[], mixed=[], page_size=16, num_q_heads=4, num_kv_heads=2,
        head_dim=64, kv="f16",
    )  # fmt: skip
    with pytest.raises(ValueError, match="bf16 containers of their bits"):
        ragged_paged_attention(q, k, v, cache, md, sm_scale=0.1, interpret=INTERPRET)
    with pytest.raises(ValueError, match="f16_bits pages must be bfloat16 containers"):
        ragged_paged_attention(
            q, k, v, LayerKV(cache.pages, None, True), md, sm_scale=0.1, interpret=INTERPRET
        )


@pytest.mark.slow
def test_xla_io_reads_and_writes_a_container_pool_as_f16():
    # Early exit's KV propagation writes with paged_io on every backend, the Pallas one too.
    _, k, v, cache, md = make_step(
        7, decode=[5], prefill=[6], mixed=[], page_size=16, num_q_heads=4, num_kv_heads=2,
        head_dim=64, kv="f16",
    )  # fmt: skip
    written = write_kv(kernel_cache(cache), k, v, md.slot_mapping)
    want = write_kv(cache, k, v, md.slot_mapping)
    assert written.f16_bits and written.pages.dtype == F16_CONTAINER
    np.testing.assert_array_equal(f16_values(written), f16_values(want))
    np.testing.assert_array_equal(
        np.asarray(gather_sequences(written, md.page_indices, jnp.float32)),
        np.asarray(gather_sequences(want, md.page_indices, jnp.float32)),
    )


@pytest.mark.slow
def test_f16_engine_on_pallas_matches_xla_and_keeps_a_container_pool():
    cfg = dataclasses.replace(TINY_MODEL, head_dim=64)  # the shipped model's head_dim
    model = LlamaForCausalLM(cfg, dtype=jnp.float16, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    # 40 tokens overflow the 32-token step budget: a prefill chunk, then a mixed chunk.
    prompts = [rng.integers(3, 97, size=n).tolist() for n in (40, 9, 3)]
    greedy = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (4, 6, 3)]
    # The same 32 pages on both backends, so both block managers hand out the same pages.
    engines = {
        b: tiny_engine(
            model,
            attention_backend=b,
            dtype="float16",
            kv_pool_bytes=pool_bytes(page_layout(cfg, b), F16, 8, 32),
        )
        for b in ("xla", "pallas")
    }
    outputs = {b: e.generate(prompts, greedy) for b, e in engines.items()}
    for xla, pallas in zip(outputs["xla"], outputs["pallas"], strict=True):
        assert len(pallas.token_ids) == len(xla.token_ids) > 0
        assert pallas.token_ids == xla.token_ids
    pallas_pool = engines["pallas"].runner.kv_caches
    xla_pool = engines["xla"].runner.kv_caches
    assert all(c.pages.dtype == F16_CONTAINER and c.f16_bits for c in pallas_pool)
    assert all(c.pages.dtype == F16 for c in xla_pool)
    # Layer 0's K/V depend only on the tokens, which agree: the container holds the very f16
    # bits XLA wrote (pages lane-padded to 128 for the kernel; page 0 takes padding).
    got = f16_values(pallas_pool[0])[1:, ..., : cfg.head_dim]
    want = f16_values(xla_pool[0])[1:]
    assert np.any(want)
    np.testing.assert_array_equal(got, want)
