"""The blocked XLA ragged paged attention (xla_rpa.py) and the naive paged reference
(reference.py) against dense attention on unpaged K/V, on random ragged batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from claimbench.kernels import reference, xla_decode, xla_prefill
from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    LayerKV,
    container_dtype,
    from_container,
    int8_scales_shape,
)
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.kernels.reference import dense_causal_attention, write_kv
from claimbench.kernels.xla_rpa import ragged_paged_attention

PAGE_SIZE = 4
NUM_PAGES = 64
PAGES_PER_SEQ = 8
MAX_LEN = PAGE_SIZE * PAGES_PER_SEQ  # 32 positions per sequence
HQ, HKV, D = 4, 2, 8
SM_SCALE = D**-0.5

paged = jax.jit(ragged_paged_attention, static_argnames=("sm_scale", "sliding_window", "soft_cap"))
dense = jax.jit(dense_causal_attention, static_argnames=("sm_scale", "sliding_window", "soft_cap"))


def empty_cache(dtype):
    pages = jnp.zeros((NUM_PAGES, PAGE_SIZE, 2 * HKV, D), dtype)
    if dtype == jnp.int8:
        return LayerKV(pages, jnp.ones(int8_scales_shape(NUM_PAGES, PAGE_SIZE, 2 * HKV)))
    if dtype == FP8_DTYPE:
        return LayerKV(pages, jnp.asarray([0.05, 0.04], jnp.float32))
    return LayerKV(pages, None)


def build_case(specs, *, pad_tokens=0, pad_seqs=0, dtype=jnp.float32, seed=0):
    """specs: (context_len, q_len) per sequence, in decode / prefill-only / mixed order.

    Returns (q, k, v, cache with every context already written, md, k_all, v_all) where
    k_all/v_all f32[num_seqs, MAX_LEN, HKV, D] hold each sequence's whole K/V.
    """
    rng = np.random.default_rng(seed)
    num_tokens = sum(q for _, q in specs) + pad_tokens
    num_slots = len(specs) + pad_seqs
    pages = rng.permutation(np.arange(1, NUM_PAGES))  # never the null page
    page_indices = np.full((num_slots, PAGES_PER_SEQ), NULL_PAGE, np.int32)
    k_all = rng.standard_normal((len(specs), MAX_LEN, HKV, D), np.float32)
    v_all = rng.standard_normal((len(specs), MAX_LEN, HKV, D), np.float32)
    q = rng.standard_normal((num_tokens, HQ, D), np.float32)
    k_new = rng.standard_normal((num_tokens, HKV, D), np.float32)
    v_new = rng.standard_normal((num_tokens, HKV, D), np.float32)
    cu, kv_lens, slots = [0], [], []
    ctx_slots, ctx_k, ctx_v = [], [], []
    used = 0
    for i, (ctx, q_len) in enumerate(specs):
        total = ctx + q_len
        n_pages = -(-total // PAGE_SIZE)
        page_indices[i, :n_pages] = pages[used : used + n_pages]
        used += n_pages
        seq_slots = [
            page_indices[i, p // PAGE_SIZE] * PAGE_SIZE + p % PAGE_SIZE for p in range(total)
        ]
        start = cu[-1]
        k_all[i, ctx:total] = k_new[start : start + q_len]
        v_all[i, ctx:total] = v_new[start : start + q_len]
        ctx_slots += seq_slots[:ctx]
        ctx_k.append(k_all[i, :ctx])
        ctx_v.append(v_all[i, :ctx])
        slots += seq_slots[ctx:]
        cu.append(start + q_len)
        kv_lens.append(total)
    cache = empty_cache(dtype)
    if ctx_slots:
        cache = jax.jit(write_kv)(
            cache, np.concatenate(ctx_k), np.concatenate(ctx_v), np.asarray(ctx_slots, np.int32)
        )
    num_decode = sum(1 for _, ql in specs if ql == 1)
    num_prefill = sum(1 for c, ql in specs if ql > 1 and c == 0)
    md = AttentionMetadata(
        slot_mapping=jnp.asarray(slots + [0] * pad_tokens, jnp.int32),  # padding -> null page
        cu_q_lens=jnp.asarray(cu + [cu[-1]] * pad_seqs, jnp.int32),
        kv_lens=jnp.asarray(kv_lens + [0] * pad_seqs, jnp.int32),
        page_indices=jnp.asarray(page_indices),
        num_seqs=jnp.asarray([len(specs)], jnp.int32),
        distribution=jnp.asarray([num_decode, num_decode + num_prefill, len(specs)], jnp.int32),
    )
    return q, k_new, v_new, cache, md, k_all, v_all


def dense_reference(q, specs, k_all, v_all, **kw):
    """Every sequence through dense_causal_attention in one batch, left-padded.

    Sequence i's K/V are shifted right so they end at MAX_LEN and its queries end at the
    last query row: relative positions, hence the causal mask, are unchanged.
    """
    max_q = max(ql for _, ql in specs)
    n = len(specs)
    qb = np.zeros((n, max_q, HQ, D), np.float32)
    kb = np.zeros((n, MAX_LEN, HKV, D), np.float32)
    vb = np.zeros_like(kb)
    valid = np.zeros((n, MAX_LEN), bool)
    start = 0
    for i, (ctx, q_len) in enumerate(specs):
        total = ctx + q_len
        qb[i, max_q - q_len :] = q[start : start + q_len]
        kb[i, MAX_LEN - total :] = k_all[i, :total]
        vb[i, MAX_LEN - total :] = v_all[i, :total]
        valid[i, MAX_LEN - total :] = True
        start += q_len
    out = np.asarray(dense(qb, kb, vb, sm_scale=SM_SCALE, kv_valid=valid, **kw))
    return np.concatenate([out[i, max_q - ql :] for i, (_, ql) in enumerate(specs)])


CASES = {
    "decode_only": [(5, 1), (0, 1), (11, 1), (3, 1)],
    "prefill_only": [(0, 7), (0, 1 + PAGE_SIZE), (0, 2)],
    "mixed": [(9, 1), (2, 1), (0, 6), (0, 3), (4, 5), (13, 3)],
    "page_boundaries": [(PAGE_SIZE - 1, 1), (PAGE_SIZE, 1), (0, 2 * PAGE_SIZE), (PAGE_SIZE - 1, 2)],
    "full_length": [(MAX_LEN - 1, 1), (MAX_LEN - 9, 9)],
}


naive = jax.jit(
    reference.ragged_paged_attention, static_argnames=("sm_scale", "sliding_window", "soft_cap")
)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_naive_paged_reference_matches_dense_attention(name):
    # The reference the backends are held to, itself held to attention on unpaged K/V.
    specs = CASES[name]
    q, k, v, cache, md, k_all, v_all = build_case(specs, pad_tokens=3, pad_seqs=2)
    out, _ = naive(q, k, v, cache, md, sm_scale=SM_SCALE, sliding_window=5, soft_cap=2.0)
    expected = dense_reference(q, specs, k_all, v_all, sliding_window=5, soft_cap=2.0)
    np.testing.assert_allclose(out[: len(expected)], expected, rtol=2e-5, atol=2e-5)
    assert np.all(np.asarray(out[len(expected) :]) == 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("pad_tokens, pad_seqs", [(0, 0), (5, 3)])
def test_matches_dense_attention(name, pad_tokens, pad_seqs):
    specs = CASES[name]
    q, k, v, cache, md, k_all, v_all = build_case(specs, pad_tokens=pad_tokens, pad_seqs=pad_seqs)
    out, new_cache = paged(q, k, v, cache, md, sm_scale=SM_SCALE)
    num_real = len(q) - pad_tokens
    expected = dense_reference(q, specs, k_all, v_all)
    np.testing.assert_allclose(out[:num_real], expected, rtol=2e-5, atol=2e-5)
    # The new K/V landed at the slot mapping: reading it back gives the inputs.
    flat = np.asarray(new_cache.pages).reshape(-1, 2 * HKV, D)
    slots = np.asarray(md.slot_mapping)[:num_real]
    np.testing.assert_array_equal(flat[slots][:, 0::2], k[:num_real])
    np.testing.assert_array_equal(flat[slots][:, 1::2], v[:num_real])


def test_sliding_window_and_soft_cap():
    specs = CASES["mixed"]
    q, k, v, cache, md, k_all, v_all = build_case(specs, pad_tokens=2, pad_seqs=1, seed=3)
    kw = dict(sliding_window=3, soft_cap=2.0)
    out, _ = paged(q, k, v, cache, md, sm_scale=SM_SCALE, **kw)
    expected = dense_reference(q, specs, k_all, v_all, **kw)
    np.testing.assert_allclose(out[: len(q) - 2], expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype, tol", [(jnp.bfloat16, 3e-2), (jnp.int8, 5e-2), (FP8_DTYPE, 0.25)])
def test_quantized_caches_stay_close(dtype, tol):
    specs = CASES["mixed"]
    q, k, v, cache, md, k_all, v_all = build_case(specs, pad_tokens=1, dtype=dtype, seed=5)
    out, _ = paged(q, k, v, cache, md, sm_scale=SM_SCALE)
    expected = dense_reference(q, specs, k_all, v_all)
    err = float(np.max(np.abs(np.asarray(out[: len(q) - 1], np.float32) - expected)))
    assert err < tol


@pytest.mark.slow
def test_random_ragged_batches():
    rng = np.random.default_rng(11)
    for trial in range(3):
        n_dec, n_pre, n_mix = rng.integers(1, 4, size=3)
        specs = [(int(rng.integers(0, MAX_LEN)), 1) for _ in range(n_dec)]
        specs += [(0, int(rng.integers(2, 12))) for _ in range(n_pre)]
        specs += [(int(rng.integers(1, 20)), int(rng.integers(2, 12))) for _ in range(n_mix)]
        q, k, v, cache, md, k_all, v_all = build_case(specs, pad_tokens=3, pad_seqs=2, seed=trial)
        out, _ = paged(q, k, v, cache, md, sm_scale=SM_SCALE)
        expected = dense_reference(q, specs, k_all, v_all)
        np.testing.assert_allclose(out[: len(q) - 3], expected, rtol=2e-5, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("storage", [jnp.bfloat16, FP8_DTYPE])
def test_bit_container_pages_match_value_pages(storage):
    """bf16/fp8 pages held as same-width integer bits write and attend exactly alike."""
    specs = [(7, 1), (0, 6), (5, 3)]
    q, k, v, values, md, _, _ = build_case(specs, dtype=storage, pad_seqs=1)
    bits = LayerKV(
        jax.lax.bitcast_convert_type(values.pages, container_dtype(storage)), values.scales
    )
    out_values, cache_values = paged(q, k, v, values, md, sm_scale=SM_SCALE)
    out_bits, cache_bits = paged(q, k, v, bits, md, sm_scale=SM_SCALE)
    assert cache_bits.pages.dtype == container_dtype(storage) != storage
    np.testing.assert_array_equal(np.asarray(out_bits), np.asarray(out_values))
    np.testing.assert_array_equal(
        np.asarray(from_container(cache_bits.pages).astype(jnp.float32)),
        np.asarray(cache_values.pages.astype(jnp.float32)),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, dtype",
    [({}, jnp.float32), ({"sliding_window": 5, "soft_cap": 2.0}, jnp.float32), ({}, jnp.int8)],
)
@pytest.mark.parametrize("pad_tokens", [0, 2])
def test_attention_across_many_blocks(monkeypatch, options, dtype, pad_tokens):
    # Two-page (8-token) decode blocks: contexts span up to four blocks, ending mid-block.
    # 3-row prefill blocks: chunks span several, the last window clamped at the array end.
    monkeypatch.setattr(xla_decode, "DECODE_BLOCK_TOKENS", 2 * PAGE_SIZE)
    monkeypatch.setattr(xla_prefill, "PREFILL_BLOCK_TOKENS", 3)
    monkeypatch.setattr(xla_prefill, "PREFILL_KV_BLOCK_TOKENS", 2 * PAGE_SIZE)
    specs = [(MAX_LEN - 1, 1), (8, 1), (7, 1), (17, 1), (0, 1), (0, 7), (5, 4), (9, 8)]
    q, k, v, cache, md, k_all, v_all = build_case(
        specs, pad_tokens=pad_tokens, pad_seqs=1, dtype=dtype
    )
    fresh = jax.jit(
        ragged_paged_attention, static_argnames=("sm_scale", "sliding_window", "soft_cap")
    )
    out, _ = fresh(q, k, v, cache, md, sm_scale=SM_SCALE, **options)
    expected = dense_reference(q, specs, k_all, v_all, **options)
    tol = 5e-2 if dtype == jnp.int8 else 2e-5
    np.testing.assert_allclose(out[: len(q) - pad_tokens], expected, rtol=tol, atol=tol)
