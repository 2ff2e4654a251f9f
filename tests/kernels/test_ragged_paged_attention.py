"""The Pallas ragged paged attention kernel, run in TPU interpret mode on CPU.

Checked against the naive paged reference (kernels/reference.py) and the XLA backend
(kernels/xla_rpa.py), and the cache after the kernel's fused write against the reference's,
bit for bit on every real page (page 0 is the null page that padded tokens write to).
Shapes stay tiny: interpret mode simulates every DMA and semaphore in Python.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# The interpreter keeps its race-detector verdict here; JAX has no public accessor for it.
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpreter
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from claimbench.kernels import reference, xla_rpa
from claimbench.kernels.kv_quant import (
    F16_CONTAINER,
    FP8_DTYPE,
    LayerKV,
    from_container,
    quantize_int8_pages,
    value_dtype,
)
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.kernels.pallas_rpa import ragged_paged_attention
from claimbench.kernels.rpa_kernel import f16_bits_to_f32

KV_DTYPES = {
    "f32": jnp.float32,
    "bf16": jnp.bfloat16,
    "f16": jnp.float16,
    "int8": jnp.int8,
    "fp8": FP8_DTYPE,
}
INTERPRET = pltpu.InterpretParams()


def make_step(
    seed: int,
    *,
    decode: list[int],
    prefill: list[int],
    mixed: list[tuple[int, int]],
    page_size: int,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    kv: str,
    pad_seqs: int = 0,
    pad_tokens: int = 0,
):
    """A random engine step: decode kv_lens, prefill q_lens, mixed (q_len, kv_len) chunks.

    Returns (q, k, v, cache, md) laid out as the engine does: groups in order, pages drawn
    at random from 1.. (page 0 is the null page), padded sequence slots and padded tokens
    pointing at page 0.
    """
    rng = np.random.default_rng(seed)
    seqs = [(1, n) for n in decode] + [(n, n) for n in prefill] + list(mixed)
    num_seqs = len(seqs)
    max_num_seqs = num_seqs + pad_seqs
    num_tokens = sum(q_len for q_len, _ in seqs) + pad_tokens
    pages_needed = [math.ceil(kv_len / page_size) for _, kv_len in seqs]
    pages_per_seq = max(pages_needed, default=1) + 1
    num_pages = sum(pages_needed) + 3
    free_pages = rng.permutation(np.arange(1, num_pages))
    page_indices = np.full((max_num_seqs, pages_per_seq), NULL_PAGE, np.int32)
    kv_lens = np.zeros(max_num_seqs, np.int32)
    cu_q_lens = np.zeros(max_num_seqs + 1, np.int32)
    slot_mapping = np.arange(num_tokens, dtype=np.int32) % page_size  # padding -> page 0
    token = 0
    for i, (q_len, kv_len) in enumerate(seqs):
        page_indices[i, : pages_needed[i]] = free_pages[: pages_needed[i]]
        free_pages = free_pages[pages_needed[i] :]
        kv_lens[i] = kv_len
        for j in range(q_len):
            position = kv_len - q_len + j
            page = page_indices[i, position // page_size]
            slot_mapping[token + j] = page * page_size + position % page_size
        token += q_len
        cu_q_lens[i + 1] = token
    cu_q_lens[num_seqs + 1 :] = token
    num_decode, num_prefill = len(decode), len(prefill)
    md = AttentionMetadata(
        slot_mapping=jnp.asarray(slot_mapping),
        cu_q_lens=jnp.asarray(cu_q_lens),
        kv_lens=jnp.asarray(kv_lens),
        page_indices=jnp.asarray(page_indices),
        num_seqs=jnp.asarray([num_seqs], jnp.int32),
        distribution=jnp.asarray([num_decode, num_decode + num_prefill, num_seqs], jnp.int32),
    )
    dtype = {"f32": jnp.float32, "f16": jnp.float16}.get(kv, jnp.bfloat16)
    q = jnp.asarray(rng.standard_normal((num_tokens, num_q_heads, head_dim)), dtype)
    k = jnp.asarray(rng.standard_normal((num_tokens, num_kv_heads, head_dim)), dtype)
    v = jnp.asarray(rng.standard_normal((num_tokens, num_kv_heads, head_dim)), dtype)
    old = jnp.asarray(rng.standard_normal((num_pages, page_size, 2 * num_kv_heads, head_dim)))
    if kv == "int8":
        cache = LayerKV(*quantize_int8_pages(old))
    elif kv == "fp8":
        scales = jnp.asarray([0.02, 0.01], jnp.float32)  # (k_scale, v_scale)
        cache = LayerKV((old / jnp.tile(scales, num_kv_heads)[:, None]).astype(FP8_DTYPE), scales)
    else:
        cache = LayerKV(old.astype(KV_DTYPES[kv]), None)
    return q, k, v, cache, md


def kernel_cache(cache: LayerKV) -> LayerKV:
    """The cache as the kernel takes it: f16 pages as bf16 containers of their bits, as the
    engine allocates them for the Pallas backend (kv_quant.kv_container_dtype)."""
    if cache.pages.dtype != jnp.float16:
        return cache
    return LayerKV(jax.lax.bitcast_convert_type(cache.pages, F16_CONTAINER), None, True)


def num_real_tokens(md: AttentionMetadata) -> int:
    return int(md.cu_q_lens[int(md.num_seqs[0])])


def as_f32(x: jax.Array) -> np.ndarray:
    return np.asarray(x.astype(jnp.float32))


@functools.partial(jax.jit, static_argnames=("sm_scale", "sliding_window", "soft_cap"))
def reference_step(q, k, v, cache, md, **options):
    return reference.ragged_paged_attention(q, k, v, cache, md, **options)


@functools.partial(jax.jit, static_argnames=("sm_scale", "sliding_window", "soft_cap"))
def xla_step(q, k, v, cache, md, **options):
    return xla_rpa.ragged_paged_attention(q, k, v, cache, md, **options)


def check_against_references(q, k, v, cache, md, out, new_cache, *, tol, **options):
    """Kernel results vs the naive paged reference and the XLA backend, and the cache bit
    for bit against the reference's."""
    ref_out, ref_cache = reference_step(q, k, v, cache, md, **options)
    num_tokens = num_real_tokens(md)
    np.testing.assert_allclose(
        as_f32(out[:num_tokens]), as_f32(ref_out[:num_tokens]), atol=tol, rtol=tol
    )
    assert not np.any(as_f32(out[num_tokens:])), "rows of padded tokens must stay zero"
    # Real pages exactly as the reference's scatter left them; page 0 takes padding writes.
    pages = from_container(new_cache.pages, value_dtype(new_cache))
    np.testing.assert_array_equal(as_f32(pages[1:]), as_f32(ref_cache.pages[1:]))
    if cache.pages.dtype == jnp.int8:
        np.testing.assert_array_equal(
            np.asarray(new_cache.scales[1:]), np.asarray(ref_cache.scales[1:])
        )
    elif cache.scales is not None:
        np.testing.assert_array_equal(np.asarray(new_cache.scales), np.asarray(cache.scales))
    xla_out, _ = xla_step(q, k, v, cache, md, **options)
    np.testing.assert_allclose(
        as_f32(out[:num_tokens]), as_f32(xla_out[:num_tokens]), atol=tol, rtol=tol
    )


@pytest.mark.slow
def test_hand_computed_decode_and_prefill():
    # One query/KV head, head_dim 2, pages of 2 tokens, sm_scale 1.
    # Sequence 0 decodes its 3rd token: K rows k0 = k1 = [0, 0] are cached on page 1 and
    # the new k2 = [ln 2, 0] goes to page 2. With q = [1, 0] the scores are [0, 0, ln 2],
    # exp -> [1, 1, 2], softmax [1/4, 1/4, 1/2]; V rows [4, 0], [0, 4], new [2, 2]:
    # out = [1/4 * 4 + 1/2 * 2, 1/4 * 4 + 1/2 * 2] = [2, 2].
    # Sequence 1 prefills 2 tokens on page 3: k0 = [0, 0], k1 = [ln 3, 0], v0 = [1, 0],
    # v1 = [0, 1], both queries [1, 0]. Token 0 sees only itself: out = v0 = [1, 0].
    # Token 1 scores [0, ln 3] -> exp [1, 3] -> softmax [1/4, 3/4]: out = [1/4, 3/4].
    # Token 3 is padding; it writes page 0 in the reference and nothing here.
    ln2, ln3 = np.float32(math.log(2.0)), np.float32(math.log(3.0))
    q = jnp.asarray([[[1.0, 0.0]], [[1.0, 0.0]], [[1.0, 0.0]], [[5.0, 5.0]]])
    k = jnp.asarray([[[ln2, 0.0]], [[0.0, 0.0]], [[ln3, 0.0]], [[7.0, 7.0]]])
    v = jnp.asarray([[[2.0, 2.0]], [[1.0, 0.0]], [[0.0, 1.0]], [[7.0, 7.0]]])
    pages = jnp.full((4, 2, 2, 2), -9.0)  # [page, slot, (K, V), head_dim]
    pages = pages.at[1, 0].set(jnp.asarray([[0.0, 0.0], [4.0, 0.0]]))
    pages = pages.at[1, 1].set(jnp.asarray([[0.0, 0.0], [0.0, 4.0]]))
    md = AttentionMetadata(
        slot_mapping=jnp.asarray([4, 6, 7, 0], jnp.int32),  # page * 2 + slot
        cu_q_lens=jnp.asarray([0, 1, 3], jnp.int32),
        kv_lens=jnp.asarray([3, 2], jnp.int32),
        page_indices=jnp.asarray([[1, 2], [3, 0]], jnp.int32),
        num_seqs=jnp.asarray([2], jnp.int32),
        distribution=jnp.asarray([1, 2, 2], jnp.int32),
    )
    out, new_cache = ragged_paged_attention(
        q, k, v, LayerKV(pages, None), md, sm_scale=1.0, interpret=INTERPRET
    )
    expected = [[[2.0, 2.0]], [[1.0, 0.0]], [[0.25, 0.75]], [[0.0, 0.0]]]
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-6)
    written = np.asarray(new_cache.pages)
    np.testing.assert_array_equal(written[2, 0], [[ln2, 0.0], [2.0, 2.0]])
    np.testing.assert_array_equal(written[3], [[[0.0, 0.0], [1.0, 0.0]], [[ln3, 0.0], [0.0, 1.0]]])
    np.testing.assert_array_equal(written[2, 1], np.full((2, 2), -9.0))  # untouched slot
    np.testing.assert_array_equal(written[0], np.full((2, 2, 2), -9.0))  # padding not written


# (name, step, knobs, options). Knobs None means the per-chip defaults.
CASES = [
    (
        "decode ps16 gqa1 d64 bf16, padded slots and tokens",
        dict(decode=[1, 15, 16, 17, 40], prefill=[], mixed=[], page_size=16, num_q_heads=2,
             num_kv_heads=2, head_dim=64, kv="bf16", pad_seqs=2, pad_tokens=3),
        dict(num_kv_pages_per_block=1, num_queries_per_block=8),
        dict(sm_scale=0.125),
    ),
    (
        "decode ps32 gqa8 d128 int8",
        dict(decode=[3, 32, 33, 70], prefill=[], mixed=[], page_size=32, num_q_heads=8,
             num_kv_heads=1, head_dim=128, kv="int8", pad_seqs=1),
        dict(num_kv_pages_per_block=2, num_queries_per_block=8),
        dict(sm_scale=128**-0.5),
    ),
    (
        "prefill ps16 gqa4 d128 bf16, several q blocks",
        dict(decode=[], prefill=[5, 16, 33], mixed=[], page_size=16, num_q_heads=8,
             num_kv_heads=2, head_dim=128, kv="bf16", pad_tokens=2),
        dict(num_kv_pages_per_block=2, num_queries_per_block=8),
        dict(sm_scale=128**-0.5),
    ),
    (
        "prefill ps32 gqa1 d64 f32, sliding window",
        dict(decode=[], prefill=[40, 7], mixed=[], page_size=32, num_q_heads=2,
             num_kv_heads=2, head_dim=64, kv="f32", pad_seqs=1),
        dict(num_kv_pages_per_block=1, num_queries_per_block=16),
        dict(sm_scale=0.125, sliding_window=24),
    ),
    (
        "mixed ps16 gqa4 d64 int8, padded slots and tokens",
        dict(decode=[9, 16], prefill=[12], mixed=[(6, 20), (17, 50)], page_size=16,
             num_q_heads=4, num_kv_heads=1, head_dim=64, kv="int8", pad_seqs=2, pad_tokens=5),
        dict(num_kv_pages_per_block=2, num_queries_per_block=8),
        dict(sm_scale=0.125),
    ),
    (
        "mixed ps16 gqa1 d128 bf16, soft cap and sliding window",
        dict(decode=[30, 5], prefill=[], mixed=[(10, 45)], page_size=16, num_q_heads=2,
             num_kv_heads=2, head_dim=128, kv="bf16", pad_tokens=1),
        dict(num_kv_pages_per_block=1, num_queries_per_block=4),
        dict(sm_scale=128**-0.5, sliding_window=18, soft_cap=1.5),
    ),
    (
        # f16 pages reach the kernel as bf16 containers and are decoded there (kernel_cache).
        "mixed ps16 gqa2 d64 f16, soft cap",
        dict(decode=[21, 3], prefill=[9], mixed=[(7, 30)], page_size=16, num_q_heads=4,
             num_kv_heads=2, head_dim=64, kv="f16", pad_seqs=1, pad_tokens=2),
        dict(num_kv_pages_per_block=1, num_queries_per_block=8),
        dict(sm_scale=0.125, soft_cap=20.0),
    ),
    (
        "mixed ps16 gqa4 d64 f32, default blocks",
        dict(decode=[20], prefill=[3], mixed=[(9, 40)], page_size=16, num_q_heads=8,
             num_kv_heads=2, head_dim=64, kv="f32", pad_seqs=1, pad_tokens=2),
        None,
        dict(sm_scale=0.125),
    ),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("step", "knobs", "options"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_random_steps_match_references(step, knobs, options):
    q, k, v, cache, md = make_step(len(step["decode"]) + 7 * len(step["mixed"]), **step)
    out, new_cache = ragged_paged_attention(
        q, k, v, kernel_cache(cache), md, **options, **(knobs or {}), interpret=INTERPRET
    )
    tol = {"f32": 1e-5, "f16": 2e-3}.get(step["kv"], 2e-2)
    check_against_references(q, k, v, cache, md, out, new_cache, tol=tol, **options)


@pytest.mark.slow
def test_fp8_under_jit_with_donated_cache_and_eager_dmas():
    # As the engine calls it: inside jit, the cache donated, metadata traced (so only the
    # static checks run). Eager DMAs complete at issue, the opposite extreme to "on_wait".
    step = dict(decode=[33], prefill=[20], mixed=[(9, 64)], page_size=32, num_q_heads=8,
                num_kv_heads=1, head_dim=128, kv="fp8", pad_seqs=1, pad_tokens=2)  # fmt: skip
    q, k, v, cache, md = make_step(3, **step)
    kernel = functools.partial(
        ragged_paged_attention,
        sm_scale=128**-0.5,
        num_kv_pages_per_block=1,
        num_queries_per_block=8,
        interpret=pltpu.InterpretParams(dma_execution_mode="eager"),
    )
    donated = LayerKV(jnp.copy(cache.pages), jnp.copy(cache.scales))
    out, new_cache = jax.jit(kernel, donate_argnums=3)(q, k, v, donated, md)
    check_against_references(q, k, v, cache, md, out, new_cache, tol=2e-2, sm_scale=128**-0.5)


@pytest.mark.slow
def test_no_races_between_dmas_and_compute():
    # One-page KV blocks and 4-token q blocks: every sequence crosses several blocks, so
    # prefetches into the other buffer, write-backs of new rows and output sends overlap
    # compute everywhere. int8 adds the scale DMAs.
    step = dict(decode=[17], prefill=[], mixed=[(6, 20)], page_size=16, num_q_heads=4,
                num_kv_heads=2, head_dim=64, kv="int8", pad_seqs=1, pad_tokens=2)  # fmt: skip
    q, k, v, cache, md = make_step(5, **step)
    out, new_cache = ragged_paged_attention(
        q, k, v, cache, md, sm_scale=0.125, num_kv_pages_per_block=1, num_queries_per_block=4,
        interpret=pltpu.InterpretParams(detect_races=True),
    )  # fmt: skip
    out.block_until_ready()
    assert tpu_interpreter.races is not None, "the race detector did not run"
    assert not tpu_interpreter.races.races_found
    check_against_references(q, k, v, cache, md, out, new_cache, tol=2e-2, sm_scale=0.125)


def test_race_detector_sees_an_unawaited_dma():
    # Control for the test above: a kernel that reads a buffer while a DMA into it is in
    # flight is reported, so "no races" there is a real verdict.
    def racy(x_hbm, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_hbm, buf, sem)
        copy.start()
        o_ref[...] = buf[...]
        copy.wait()

    x = jnp.ones((8, 128), jnp.float32)
    pl.pallas_call(
        racy,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())],
        interpret=pltpu.InterpretParams(detect_races=True, uninitialized_memory="zero"),
    )(x).block_until_ready()
    assert tpu_interpreter.races.races_found


@pytest.mark.slow
def test_empty_step_leaves_cache_untouched():
    # The shapes and knobs of the first random case, so the compiled kernel is reused.
    step, knobs, options = CASES[0][1:]
    q, k, v, cache, md = make_step(9, **step)
    md = AttentionMetadata(
        slot_mapping=jnp.zeros_like(md.slot_mapping),
        cu_q_lens=jnp.zeros_like(md.cu_q_lens),
        kv_lens=jnp.zeros_like(md.kv_lens),
        page_indices=jnp.zeros_like(md.page_indices),
        num_seqs=jnp.asarray([0], jnp.int32),
        distribution=jnp.zeros(3, jnp.int32),
    )
    out, new_cache = ragged_paged_attention(
        q, k, v, cache, md, **options, **knobs, interpret=INTERPRET
    )
    assert not np.any(as_f32(out))
    np.testing.assert_array_equal(as_f32(new_cache.pages), as_f32(cache.pages))


@pytest.mark.slow
@pytest.mark.parametrize("kv", ["bf16", "f16", "int8", "fp8"])
def test_lowers_to_mosaic_for_tpu(kv):
    # Without a TPU the Mosaic compiler itself cannot run, but lowering to its MLIR dialect
    # catches any primitive or ref indexing the TPU backend does not accept.
    q, k, v, cache, md = make_step(
        11, decode=[20], prefill=[], mixed=[(5, 40)], page_size=16, num_q_heads=4,
        num_kv_heads=2, head_dim=128, kv=kv,
    )  # fmt: skip
    kernel = functools.partial(
        ragged_paged_attention, sm_scale=0.1, sliding_window=32, soft_cap=30.0, interpret=False
    )
    device = jax.sharding.AbstractDevice(device_kind="TPU v6 lite", num_cores=1, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = (
            jax.jit(kernel)
            .trace(q, k, v, kernel_cache(cache), md)
            .lower(lowering_platforms=("tpu",))
        )
    assert "tpu_custom_call" in lowered.as_text()


def _bad_inputs():
    q, k, v, cache, md = make_step(
        13, decode=[5], prefill=[4], mixed=[], page_size=16, num_q_heads=4, num_kv_heads=2,
        head_dim=64, kv="bf16",
    )  # fmt: skip
    int8 = LayerKV(cache.pages.astype(jnp.int8), None)
    two_token_decode = AttentionMetadata(
        md.slot_mapping, md.cu_q_lens, md.kv_lens, md.page_indices, md.num_seqs,
        jnp.asarray([2, 2, 2], jnp.int32),
    )  # fmt: skip
    short_kv = AttentionMetadata(
        md.slot_mapping, md.cu_q_lens, md.kv_lens.at[1].set(2), md.page_indices, md.num_seqs,
        md.distribution,
    )  # fmt: skip
    return {
        "gqa": ((q[:, :3], k, v, cache, md), {}, "num_q_heads=3 not a multiple of num_kv_heads=2"),
        "pages": ((q, k[:, :1], v[:, :1], cache, md), {}, r"should be \[num_pages, page_size, 2"),
        "scales": ((q, k, v, int8, md), {}, r"int8 pages need scales float32\[5, 128\]"),
        "knob": ((q, k, v, cache, md), dict(num_kv_pages_per_block=9), "pages_per_seq=2"),
        "window": ((q, k, v, cache, md), dict(sliding_window=0), "sliding_window must be"),
        "decode": ((q, k, v, cache, two_token_decode), {}, "decode group but has q_len=4"),
        "kv_len": ((q, k, v, cache, short_kv), {}, "q_len=4 <= kv_len=2"),
    }


@pytest.mark.parametrize("name", list(_bad_inputs()))
def test_preconditions_raise_value_errors_naming_the_values(name):
    args, knobs, message = _bad_inputs()[name]
    with pytest.raises(ValueError, match=message):
        ragged_paged_attention(*args, sm_scale=0.1, **knobs, interpret=INTERPRET)


def test_f16_bits_decode_exactly():
    # Every finite f16 (subnormals included: the CPU keeps f32 subnormals), infinities, NaN.
    bits = np.arange(0, 1 << 16, dtype=np.uint16)
    f16 = bits.view(np.float16)
    container = jax.lax.bitcast_convert_type(jnp.asarray(bits), jnp.bfloat16)
    decoded = np.asarray(f16_bits_to_f32(container))
    finite = np.isfinite(f16)
    np.testing.assert_array_equal(decoded[finite], f16[finite].astype(np.float32))
    np.testing.assert_array_equal(np.isnan(decoded), np.isnan(f16))
    np.testing.assert_array_equal(decoded[np.isinf(f16)], f16[np.isinf(f16)].astype(np.float32))
