"""Quantized KV caches on the XLA path against an f32 reference.

Three layers of checks: the row quantizers against explicit rounding bounds (and one
hand-computed row); the paged write + gather (scales land beside the right token and K/V
head row); and whole ragged attention steps. For those, the int8 / fp8 cache's output must
equal, to f32 rounding, f32 attention over the round-tripped K/V (so quantization happens
exactly once, on the write, and dequantization inside attention adds nothing), and stay
within a stated tolerance of f32 attention over the exact K/V.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    FP8_MAX,
    LayerKV,
    dequantize_rows,
    fp8_row_scales,
    int8_scales_shape,
    interleave_kv,
    page_row_scales,
    quantize_int8,
    quantize_rows,
)
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.kernels.reference import gather_sequences, ragged_paged_attention, write_kv

PAGE_SIZE, NUM_PAGES, PAGES_PER_SEQ = 4, 32, 6
HQ, HKV, D = 4, 2, 16
SM_SCALE = D**-0.5
FP8_SCALES = (0.02, 0.015)  # (k, v): absmax ~4-5 of unit normals / 448 is ~0.01

attend = jax.jit(ragged_paged_attention, static_argnames=("sm_scale",))


def test_int8_row_hand_computed():
    # absmax 2.54 -> scale 0.02; 1.0 / 0.02 = 50; -0.03 / 0.02 = -1.5 rounds half to even -> -2.
    q, scale = quantize_int8(jnp.asarray([[2.54, 1.0, -0.03, 0.0]], jnp.float32))
    np.testing.assert_allclose(scale, [0.02], rtol=1e-6)
    np.testing.assert_array_equal(q, [[127, 50, -2, 0]])
    # An all-zero row gets scale 1, not a division by zero.
    q0, s0 = quantize_int8(jnp.zeros((1, 4)))
    assert float(s0[0]) == 1.0 and not np.asarray(q0).any()


def _round_trip(kv: np.ndarray, dtype, scales=None) -> np.ndarray:
    stored, row_scales = quantize_rows(jnp.asarray(kv), scales, jnp.dtype(dtype))
    if jnp.dtype(dtype) == FP8_DTYPE:
        row_scales = fp8_row_scales(scales, kv.shape[1])
    return np.asarray(dequantize_rows(stored, row_scales, jnp.float32))


def test_int8_rows_within_half_a_step_per_token_and_head():
    rng = np.random.default_rng(0)
    kv = rng.standard_normal((32, 2 * HKV, D)).astype(np.float32)
    kv[5, 1] *= 50.0  # one loud (token, V head) row must not coarsen any other row
    err = np.abs(_round_trip(kv, jnp.int8) - kv)
    step = np.abs(kv).max(-1, keepdims=True) / 127.0
    assert (err <= 0.5 * step * (1 + 1e-5)).all()
    quiet = np.ones(kv.shape[:2], bool)
    quiet[5, 1] = False
    assert err[quiet].max() < 0.5 * 5.0 / 127.0  # unit normals: absmax < 5 here


def test_fp8_rows_relative_bound_and_clipping():
    rng = np.random.default_rng(1)
    kv = rng.standard_normal((32, 2 * HKV, D)).astype(np.float32)
    scales = jnp.asarray(FP8_SCALES, jnp.float32)
    row_scale = np.tile(FP8_SCALES, HKV)[None, :, None]
    err = np.abs(_round_trip(kv, FP8_DTYPE, scales) - kv)
    # e4m3: 3 mantissa bits (half-ulp relative 2^-4); subnormal spacing 2^-9 times the scale.
    assert (err <= np.maximum(np.abs(kv) * 2.0**-4, row_scale * 2.0**-10) * (1 + 1e-5)).all()
    # Beyond FP8_MAX * scale a value saturates instead of turning into NaN / inf.
    loud = np.full((1, 2 * HKV, D), 1e3, np.float32)
    np.testing.assert_allclose(
        _round_trip(loud, FP8_DTYPE, scales), np.broadcast_to(FP8_MAX * row_scale, loud.shape)
    )


def _empty_cache(dtype) -> LayerKV:
    pages = jnp.zeros((NUM_PAGES, PAGE_SIZE, 2 * HKV, D), dtype)
    if dtype == jnp.int8:
        return LayerKV(pages, jnp.ones(int8_scales_shape(*pages.shape[:3]), jnp.float32))
    if dtype == FP8_DTYPE:
        return LayerKV(pages, jnp.asarray(FP8_SCALES, jnp.float32))
    return LayerKV(pages, None)


def test_write_and_gather_put_scales_beside_their_token_rows():
    rng = np.random.default_rng(2)
    k = rng.standard_normal((6, HKV, D)).astype(np.float32) * np.arange(1, 7)[:, None, None]
    v = rng.standard_normal((6, HKV, D)).astype(np.float32)
    slots = np.asarray([4 * PAGE_SIZE + 1, 4 * PAGE_SIZE + 2, 9 * PAGE_SIZE, 9 * PAGE_SIZE + 3,
                        2 * PAGE_SIZE, 2 * PAGE_SIZE + 1], np.int32)  # fmt: skip
    cache = write_kv(_empty_cache(jnp.int8), jnp.asarray(k), jnp.asarray(v), jnp.asarray(slots))
    kv = interleave_kv(jnp.asarray(k), jnp.asarray(v))
    _, expected_scales = quantize_int8(kv)
    flat_scales = np.asarray(page_row_scales(cache.scales, PAGE_SIZE, 2 * HKV)).reshape(-1, 2 * HKV)
    np.testing.assert_array_equal(flat_scales[slots], expected_scales)
    untouched = np.setdiff1d(np.arange(NUM_PAGES * PAGE_SIZE), slots)
    assert (flat_scales[untouched] == 1.0).all()
    # Gathering a block table [4, 9] reads tokens at offsets 1, 2, 4, 7 of the sequence.
    seq = np.asarray(gather_sequences(cache, jnp.asarray([[4, 9]], jnp.int32), jnp.float32))[0]
    got = seq[[1, 2, 4, 7]]
    want = np.asarray(kv)[:4]
    assert (np.abs(got - want) <= 0.5 * np.asarray(expected_scales)[:4, :, None] + 1e-6).all()


def _step(specs, seed):
    """A ragged step: specs (context_len, q_len) per sequence, decode-only ones first.

    Returns per-sequence K/V f32 [len, HKV, D], the new tokens' q/k/v, metadata and the
    context slots (written before the step).
    """
    rng = np.random.default_rng(seed)
    pages = rng.permutation(np.arange(1, NUM_PAGES))
    page_indices = np.full((len(specs), PAGES_PER_SEQ), NULL_PAGE, np.int32)
    cu, kv_lens, step_slots, ctx_slots, ctx_k, ctx_v, new_k, new_v = [0], [], [], [], [], [], [], []
    used = 0
    for i, (ctx, q_len) in enumerate(specs):
        total = ctx + q_len
        n = -(-total // PAGE_SIZE)
        page_indices[i, :n] = pages[used : used + n]
        used += n
        slots = [page_indices[i, p // PAGE_SIZE] * PAGE_SIZE + p % PAGE_SIZE for p in range(total)]
        k = rng.standard_normal((total, HKV, D)).astype(np.float32)
        v = rng.standard_normal((total, HKV, D)).astype(np.float32)
        ctx_slots += slots[:ctx]
        ctx_k.append(k[:ctx])
        ctx_v.append(v[:ctx])
        step_slots += slots[ctx:]
        new_k.append(k[ctx:])
        new_v.append(v[ctx:])
        cu.append(cu[-1] + q_len)
        kv_lens.append(total)
    num_decode = sum(q == 1 for _, q in specs)
    md = AttentionMetadata(
        slot_mapping=jnp.asarray(step_slots, jnp.int32),
        cu_q_lens=jnp.asarray(cu, jnp.int32),
        kv_lens=jnp.asarray(kv_lens, jnp.int32),
        page_indices=jnp.asarray(page_indices),
        num_seqs=jnp.asarray([len(specs)], jnp.int32),
        distribution=jnp.asarray([num_decode, num_decode, len(specs)], jnp.int32),
    )
    q = rng.standard_normal((cu[-1], HQ, D)).astype(np.float32)
    context = (np.concatenate(ctx_k), np.concatenate(ctx_v), np.asarray(ctx_slots, np.int32))
    return q, np.concatenate(new_k), np.concatenate(new_v), md, context


def _run(dtype, q, k, v, md, context):
    ck, cv, slots = context
    cache = write_kv(_empty_cache(dtype), jnp.asarray(ck), jnp.asarray(cv), jnp.asarray(slots))
    out, _ = attend(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), cache, md, sm_scale=SM_SCALE)
    return np.asarray(out, np.float32)


def _round_trip_kv(k, v, dtype):
    scales = jnp.asarray(FP8_SCALES, jnp.float32) if dtype == FP8_DTYPE else None
    kv = _round_trip(np.asarray(interleave_kv(jnp.asarray(k), jnp.asarray(v))), dtype, scales)
    return kv[:, 0::2], kv[:, 1::2]


SPECS = [(9, 1), (2, 1), (0, 7), (5, 6), (13, 3)]  # 2 decodes, 1 prefill, 2 mixed


# Stated tolerances (max abs error of the attention output, unit-normal q/k/v, head_dim 16):
# int8 per-token rows err <= absmax/254 (~0.015 here), which moves an output by ~1e-2 at most;
# fp8 e4m3 keeps ~2^-4 relative error per value, a few times 1e-2 on the output.
@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "tol"), [(jnp.int8, 0.03), (FP8_DTYPE, 0.12)])
def test_quantized_attention_against_f32_reference(dtype, tol):
    q, k, v, md, (ck, cv, slots) = _step(SPECS, seed=3)
    exact = _run(jnp.float32, q, k, v, md, (ck, cv, slots))
    out = _run(dtype, q, k, v, md, (ck, cv, slots))
    # Quantized once on the write, dequantized once inside attention: identical to f32
    # attention over the round-tripped values.
    rk, rv = _round_trip_kv(k, v, dtype)
    rck, rcv = _round_trip_kv(ck, cv, dtype)
    round_tripped = _run(jnp.float32, q, rk, rv, md, (rck, rcv, slots))
    np.testing.assert_allclose(out, round_tripped, rtol=1e-5, atol=1e-5)
    err = np.abs(out - exact).max()
    assert 0 < err < tol
