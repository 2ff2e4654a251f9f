"""The verify path (kernels/xla_verify.py): every short chunk of a step attended at once.

Held to the naive paged reference (kernels/reference.py) on verify-shaped steps (decode
slots beside chunks of at most 1 + k tokens, continuing cached prefixes or starting at 0),
through the kernel itself and through the "xla" backend with ``verify_width``; a step with
a longer chunk still takes the prefill path and matches too.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_ragged_paged_attention import as_f32, make_step, num_real_tokens

from claimbench.kernels import reference
from claimbench.kernels.backend import WithVerify, get_backend
from claimbench.kernels.paged_io import write_kv
from claimbench.kernels.xla_verify import chunk_lens, takes_verify_path, verify_attention

WIDTH = 5  # 1 + k, k = 4
SHAPE = dict(page_size=4, num_q_heads=4, num_kv_heads=2, head_dim=16)
# Decode kv_lens, then verify chunks (q_len <= WIDTH, kv_len): a chunk filling a page
# exactly, one crossing pages, a short one after an early rejection, one of a single token
# beside full chunks, and a chunk at position 0 (a short prompt).
VERIFY = dict(decode=[7, 20], prefill=[3], mixed=[(5, 37), (5, 8), (2, 11), (1, 30), (5, 6)])
options_cases = [{}, {"sliding_window": 6, "soft_cap": 3.0}]


@functools.partial(jax.jit, static_argnames=("sm_scale", "sliding_window", "soft_cap"))
def _reference(q, k, v, cache, md, **options):
    return reference.ragged_paged_attention(q, k, v, cache, md, **options)


@functools.partial(
    jax.jit, static_argnums=(0,), static_argnames=("sm_scale", "sliding_window", "soft_cap")
)
def _backend(attention, q, k, v, cache, md, **options):
    return attention(q, k, v, cache, md, **options)


def _check(out, q, k, v, cache, md, tol, **options):
    ref_out, _ = _reference(q, k, v, cache, md, **options)
    n = num_real_tokens(md)
    np.testing.assert_allclose(as_f32(out[:n]), as_f32(ref_out[:n]), atol=tol, rtol=tol)
    assert not np.any(as_f32(out[n:])), "rows of padded tokens must stay zero"


@pytest.mark.slow
@pytest.mark.parametrize("kv", ["f32", "bf16", "int8"])
@pytest.mark.parametrize("options", options_cases)
def test_kernel_matches_reference_on_verify_chunks(kv, options):
    q, k, v, cache, md = make_step(0, **VERIFY, **SHAPE, kv=kv, pad_seqs=2, pad_tokens=3)
    sm_scale = 0.25
    tokens, num_kv_heads, head_dim = q.shape[0], k.shape[1], q.shape[2]
    group = q.shape[1] // num_kv_heads
    written = write_kv(cache, k, v, md.slot_mapping)
    qg = q.reshape(tokens, num_kv_heads, group, head_dim)
    out = jnp.zeros(qg.shape, jnp.float32)
    got = jax.jit(functools.partial(verify_attention, width=WIDTH), static_argnums=(3, 4, 5, 6))(
        qg,
        written,
        md,
        q.dtype,
        sm_scale,
        options.get("sliding_window"),
        options.get("soft_cap"),
        out,
    )
    ref_out, _ = _reference(q, k, v, cache, md, sm_scale=sm_scale, **options)
    got = got.reshape(q.shape)
    # The kernel fills the chunks' rows and leaves the decode slots' and padding's alone.
    first_chunk = int(md.cu_q_lens[int(md.distribution[0])])
    n = num_real_tokens(md)
    tol = 2e-5 if kv == "f32" else 2e-2
    np.testing.assert_allclose(
        as_f32(got[first_chunk:n]), as_f32(ref_out[first_chunk:n]), atol=tol, rtol=tol
    )
    assert not np.any(as_f32(got[:first_chunk])) and not np.any(as_f32(got[n:]))


@pytest.mark.slow
@pytest.mark.parametrize("options", options_cases)
def test_xla_backend_with_verify_width_matches_reference(options):
    attention = get_backend("xla", verify_width=WIDTH)
    assert attention == WithVerify(WIDTH)
    q, k, v, cache, md = make_step(1, **VERIFY, **SHAPE, kv="f32", pad_seqs=1, pad_tokens=2)
    assert bool(takes_verify_path(md, WIDTH))
    out, new_cache = _backend(attention, q, k, v, cache, md, sm_scale=0.25, **options)
    _check(out, q, k, v, cache, md, 2e-5, sm_scale=0.25, **options)
    _, ref_cache = _reference(q, k, v, cache, md, sm_scale=0.25, **options)
    np.testing.assert_array_equal(as_f32(new_cache.pages[1:]), as_f32(ref_cache.pages[1:]))


def test_a_longer_chunk_takes_the_prefill_path():
    step = dict(decode=[9], prefill=[12], mixed=[(5, 14), (7, 30)])
    q, k, v, cache, md = make_step(2, **step, **SHAPE, kv="f32", pad_seqs=1)
    assert int(jnp.max(chunk_lens(md))) > WIDTH and not takes_verify_path(md, WIDTH)
    out, _ = _backend(get_backend("xla", verify_width=WIDTH), q, k, v, cache, md, sm_scale=0.25)
    _check(out, q, k, v, cache, md, 2e-5, sm_scale=0.25)


def test_only_the_xla_backend_takes_a_verify_width():
    assert not isinstance(get_backend("xla"), WithVerify)
    assert not isinstance(get_backend("pallas", verify_width=WIDTH), WithVerify)
    with pytest.raises(ValueError, match="verify_width"):
        get_backend("xla", verify_width=1)


@pytest.mark.slow
def test_one_short_chunk_stays_on_the_prefill_path():
    q, k, v, cache, md = make_step(3, decode=[4, 9], prefill=[], mixed=[(5, 21)], **SHAPE, kv="f32")
    assert not takes_verify_path(md, WIDTH)
    out, _ = _backend(get_backend("xla", verify_width=WIDTH), q, k, v, cache, md, sm_scale=0.25)
    _check(out, q, k, v, cache, md, 2e-5, sm_scale=0.25)
