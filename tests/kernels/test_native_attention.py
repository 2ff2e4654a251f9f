"""The native CPU attention kernels against the XLA path and dense attention.

Decode: random pages in every storage format the kernel reads (f32, f16, bf16 and fp8 as
values or as bit containers, int8 with per-row scales), random block tables, contexts that
end mid-page and on page boundaries, padding slots past the decode group, GQA groups of 1,
2 and 4, sliding window and soft cap. Prefill: the whole "cpu" backend on the reference
tests' ragged batches against dense attention, chunks longer than a tile, head dims with
and without a specialized kernel. Then the engine: greedy tokens on the "cpu" backend
equal those on the "xla" backend.
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_reference_attention as ref
from engine_helpers import tiny_engine, tiny_model

from claimbench.engine.sampling_params import SamplingParams
from claimbench.kernels import backend, native_attention, reference, xla_prefill
from claimbench.kernels.kv_quant import FP8_DTYPE, LayerKV, int8_scales_shape, to_container
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.kernels.native.build import NativeUnavailable, library_path
from claimbench.kernels.xla_decode import decode_attention

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: the native kernel cannot be built here",
)

PAGE_SIZE = 4
PAGES_PER_SEQ = 6
NUM_PAGES = 48


def random_cache(
    storage: str, rows: int, head_dim: int, rng, page_size: int = PAGE_SIZE
) -> LayerKV:
    shape = (NUM_PAGES, page_size, rows, head_dim)
    values = rng.standard_normal(shape).astype(np.float32)
    if storage == "f32":
        return LayerKV(jnp.asarray(values), None)
    if storage == "f16":
        return LayerKV(jnp.asarray(values, jnp.float16), None)
    if storage in ("bf16", "bf16-bits"):
        pages = jnp.asarray(values, jnp.bfloat16)
        return LayerKV(to_container(pages, jnp.uint16) if storage == "bf16-bits" else pages, None)
    if storage in ("fp8", "fp8-bits"):
        pages = jnp.asarray(values * 20, FP8_DTYPE)
        scales = jnp.asarray([0.05, 0.04], jnp.float32)
        return LayerKV(to_container(pages, jnp.uint8) if storage == "fp8-bits" else pages, scales)
    if storage == "int8":
        pages = jnp.asarray(rng.integers(-127, 128, shape), jnp.int8)
        scales = jnp.asarray(rng.uniform(0.001, 0.02, int8_scales_shape(*shape[:3])), jnp.float32)
        return LayerKV(pages, scales)
    raise ValueError(storage)


def decode_case(lens, num_slots, num_q_heads, rows, head_dim, storage, seed=0, page_size=PAGE_SIZE):
    """q f32[num_slots, Hkv, G, D], cache, md: slots past len(lens) are padding."""
    rng = np.random.default_rng(seed)
    cache = random_cache(storage, rows, head_dim, rng, page_size)
    table = np.full((num_slots, PAGES_PER_SEQ), NULL_PAGE, np.int32)
    pages = rng.permutation(np.arange(1, NUM_PAGES))
    used = 0
    for i, n in enumerate(lens):
        k = -(-n // page_size)
        table[i, :k] = pages[used : used + k]
        used += k
    kv_lens = np.zeros(num_slots, np.int32)
    kv_lens[: len(lens)] = lens
    n = len(lens)
    md = AttentionMetadata(
        slot_mapping=jnp.zeros(num_slots, jnp.int32),
        cu_q_lens=jnp.asarray(np.minimum(np.arange(num_slots + 1), n), jnp.int32),
        kv_lens=jnp.asarray(kv_lens),
        page_indices=jnp.asarray(table),
        num_seqs=jnp.asarray([n], jnp.int32),
        distribution=jnp.asarray([n, n, n], jnp.int32),
    )
    kv_heads = rows // 2
    q = rng.standard_normal((num_slots, kv_heads, num_q_heads // kv_heads, head_dim))
    return jnp.asarray(q, jnp.float32), cache, md


def both(q, cache, md, sm_scale, sliding_window=None, soft_cap=None):
    args = (jnp.float32, sm_scale, sliding_window, soft_cap)
    native = jax.jit(lambda q, c, m: native_attention.paged_decode_attention(q, c, m, *args))
    xla = jax.jit(lambda q, c, m: decode_attention(q, c, m, *args))
    return np.asarray(native(q, cache, md)), np.asarray(xla(q, cache, md))


def test_the_kernel_builds_here():
    assert native_attention.unavailable_reason() is None
    assert backend.resolve_backend_name("auto") == "cpu"


LENS = [1, PAGE_SIZE, PAGE_SIZE + 1, 2 * PAGE_SIZE - 1, PAGE_SIZE * PAGES_PER_SEQ, 7]


@pytest.fixture(params=["page", "page-reg", "page-row", "tiled", "tiled-query", "general"])
def decode_path(request, monkeypatch):
    """Each decode loop forced in turn: head_dim 64 and 128 take a specialized one, the page
    loop (every KV head of an f32 page together, where all queries fit 16 vectors: PageState
    with AVX-512, PageRegState with AVX2; the default, the tiled loop or the tiled-query loop
    where it does not apply), PageRegState on an AVX2 build (PageRowState on others; head_dim
    64; tiled-query otherwise), PageRowState on any build (head_dim 64; tiled-query otherwise),
    the tiled loop (all of a KV head's queries in registers) or the tiled-query loop (one
    query at a time); other head_dims always the general."""
    monkeypatch.setenv("CLAIMBENCH_NATIVE_DECODE", request.param)
    return request.param


# head_dim 16 takes the general decode loop, 64 the specialized ones (native/decode_tiles.h).
@pytest.mark.slow
@pytest.mark.parametrize("storage", ["f32", "f16", "bf16", "bf16-bits", "int8", "fp8", "fp8-bits"])
@pytest.mark.parametrize("head_dim", [16, 64])
def test_matches_xla_decode_for_every_storage(storage, head_dim, decode_path):
    q, cache, md = decode_case(LENS, len(LENS) + 2, 4, 4, head_dim, storage)
    native, xla = both(q, cache, md, head_dim**-0.5)
    np.testing.assert_allclose(native, xla, rtol=2e-4, atol=2e-5)
    assert np.all(native[len(LENS) :] == 0.0)  # padding slots


@pytest.mark.slow
@pytest.mark.parametrize("num_q_heads, rows", [(2, 4), (4, 4), (8, 4), (4, 8), (8, 2), (6, 4)])
@pytest.mark.parametrize("head_dim", [8, 64, 80, 128])
def test_gqa_groups_and_head_dims(num_q_heads, rows, head_dim, decode_path):
    q, cache, md = decode_case(LENS, len(LENS), num_q_heads, rows, head_dim, "f32", seed=1)
    native, xla = both(q, cache, md, head_dim**-0.5)
    np.testing.assert_allclose(native, xla, rtol=2e-4, atol=2e-5)


# Pages of 16 tokens, the engine's: whole pages and partial ones (a sequence's last, a window's
# first), every loop.
@pytest.mark.slow
@pytest.mark.parametrize("num_q_heads, rows", [(4, 4), (4, 2), (2, 4), (2, 2)])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("window", [None, 20])
def test_whole_pages_of_sixteen(num_q_heads, rows, head_dim, window, decode_path):
    lens = [16, 32, 17, 40, 5, 96]
    q, cache, md = decode_case(lens, len(lens), num_q_heads, rows, head_dim, "f32", 3, 16)
    native, xla = both(q, cache, md, head_dim**-0.5, sliding_window=window, soft_cap=None)
    np.testing.assert_allclose(native, xla, rtol=2e-4, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("window", [1, 3, PAGE_SIZE, 9])
@pytest.mark.parametrize("head_dim", [16, 64])
def test_sliding_window_and_soft_cap(window, head_dim, decode_path):
    q, cache, md = decode_case(LENS, len(LENS) + 1, 4, 4, head_dim, "f32", seed=2)
    scale = head_dim**-0.5
    native, xla = both(q * 4, cache, md, scale, sliding_window=window, soft_cap=3.0)
    np.testing.assert_allclose(native, xla, rtol=2e-4, atol=2e-5)


def test_slots_past_the_decode_group_are_zero():
    q, cache, md = decode_case(LENS, len(LENS), 4, 4, 16, "f32", seed=3)
    md = AttentionMetadata(
        md.slot_mapping,
        md.cu_q_lens,
        md.kv_lens,
        md.page_indices,
        md.num_seqs,
        jnp.asarray([3, len(LENS), len(LENS)], jnp.int32),
    )
    native, xla = both(q, cache, md, 0.25)
    np.testing.assert_allclose(native, xla, rtol=2e-4, atol=2e-5)
    assert np.all(native[3:] == 0.0) and np.any(native[:3] != 0.0)


def test_turned_off_or_without_a_compiler_it_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("CLAIMBENCH_NATIVE_DIR", str(tmp_path))
    monkeypatch.setenv("CLAIMBENCH_NATIVE", "0")
    with pytest.raises(NativeUnavailable, match="CLAIMBENCH_NATIVE=0"):
        library_path()
    monkeypatch.setenv("CLAIMBENCH_NATIVE", "1")
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NativeUnavailable, match="no C\\+\\+ compiler") as err:
        library_path()
    assert "\n" not in str(err.value)


def test_backend_falls_back_to_xla_when_unavailable(monkeypatch):
    monkeypatch.setattr(native_attention, "unavailable_reason", lambda: "no compiler here")
    assert backend.resolve_backend_name("auto") == "xla"
    with pytest.raises(ValueError, match="unavailable: no compiler here"):
        backend.resolve_backend_name("cpu")


@pytest.mark.slow
@pytest.mark.parametrize("kv_dtype", ["auto", "int8", "bf16"])
def test_cpu_engine_greedy_tokens_match_xla(kv_dtype):
    rng = np.random.default_rng(0)
    # 40 tokens overflow the 32-token step budget: a prefill chunk, then a mixed chunk.
    prompts = [rng.integers(3, 97, size=n).tolist() for n in (40, 9, 3, 17)]
    greedy = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 9, 5, 7)]
    model = tiny_model()
    outputs = {
        name: tiny_engine(model, attention_backend=name, kv_dtype=kv_dtype).generate(
            prompts, greedy
        )
        for name in ("xla", "cpu")
    }
    for xla, cpu in zip(outputs["xla"], outputs["cpu"], strict=True):
        assert len(cpu.token_ids) == len(xla.token_ids) > 0
        assert cpu.token_ids == xla.token_ids


# -- the whole "cpu" backend (native decode; native or XLA prefill) against dense attention

cpu_paged = jax.jit(
    native_attention.ragged_paged_attention,
    static_argnames=("sm_scale", "sliding_window", "soft_cap", "prefill"),
)


@pytest.mark.slow
@pytest.mark.parametrize("prefill", native_attention.PREFILL_PATHS)
@pytest.mark.parametrize("name", sorted(ref.CASES))
@pytest.mark.parametrize("pad_tokens, pad_seqs", [(0, 0), (5, 3)])
def test_cpu_backend_matches_dense_attention(name, pad_tokens, pad_seqs, prefill):
    specs = ref.CASES[name]
    q, k, v, cache, md, k_all, v_all = ref.build_case(
        specs, pad_tokens=pad_tokens, pad_seqs=pad_seqs
    )
    out, new_cache = cpu_paged(q, k, v, cache, md, sm_scale=ref.SM_SCALE, prefill=prefill)
    num_real = len(q) - pad_tokens
    expected = ref.dense_reference(q, specs, k_all, v_all)
    np.testing.assert_allclose(out[:num_real], expected, rtol=2e-5, atol=2e-5)
    assert np.all(np.asarray(out[num_real:]) == 0.0)
    flat = np.asarray(new_cache.pages).reshape(-1, 2 * ref.HKV, ref.D)
    slots = np.asarray(md.slot_mapping)[:num_real]
    np.testing.assert_array_equal(flat[slots][:, 0::2], k[:num_real])


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, dtype",
    [
        ({"sliding_window": 5, "soft_cap": 2.0}, jnp.float32),
        ({"sliding_window": 1}, jnp.float32),
        ({}, jnp.int8),
        ({}, jnp.bfloat16),
        ({}, FP8_DTYPE),
    ],
)
@pytest.mark.parametrize("prefill", native_attention.PREFILL_PATHS)
def test_cpu_backend_options_and_storages(options, dtype, prefill):
    # Long chunks: more query rows than one tile, more keys than one key tile.
    specs = [(ref.MAX_LEN - 1, 1), (7, 1), (0, 1), (0, 23), (5, 19), (9, 17)]
    q, k, v, cache, md, k_all, v_all = ref.build_case(specs, pad_tokens=3, pad_seqs=1, dtype=dtype)
    out, _ = cpu_paged(q, k, v, cache, md, sm_scale=ref.SM_SCALE, prefill=prefill, **options)
    xla, _ = jax.jit(
        reference.ragged_paged_attention, static_argnames=("sm_scale", "sliding_window", "soft_cap")
    )(q, k, v, cache, md, sm_scale=ref.SM_SCALE, **options)
    np.testing.assert_allclose(out, xla, rtol=2e-4, atol=2e-5)
    if dtype == jnp.float32:
        expected = ref.dense_reference(q, specs, k_all, v_all, **options)
        np.testing.assert_allclose(out[: len(q) - 3], expected, rtol=2e-5, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [64, 128, 40])
@pytest.mark.parametrize("num_q_heads, num_kv_heads", [(4, 2), (8, 1), (2, 2)])
def test_native_prefill_tiles_head_dims_and_groups(head_dim, num_q_heads, num_kv_heads):
    rng = np.random.default_rng(head_dim + num_q_heads)
    page_size, pages_per_seq = 16, 6
    specs = [(0, 1), (0, 70), (40, 33)]  # a decode slot, a prefill chunk, a mixed chunk
    num_tokens = sum(q for _, q in specs)
    pages = jnp.asarray(
        rng.standard_normal((24, page_size, 2 * num_kv_heads, head_dim)), jnp.float32
    )
    table = np.zeros((len(specs), pages_per_seq), np.int32)
    table[:] = rng.permutation(np.arange(1, 24))[: len(specs) * pages_per_seq].reshape(
        len(specs), pages_per_seq
    )
    cu = np.concatenate([[0], np.cumsum([q for _, q in specs])]).astype(np.int32)
    md = AttentionMetadata(
        slot_mapping=jnp.zeros(num_tokens, jnp.int32),
        cu_q_lens=jnp.asarray(cu),
        kv_lens=jnp.asarray([c + q for c, q in specs], jnp.int32),
        page_indices=jnp.asarray(table),
        num_seqs=jnp.asarray([len(specs)], jnp.int32),
        distribution=jnp.asarray([1, 2, 3], jnp.int32),
    )
    qg = jnp.asarray(
        rng.standard_normal((num_tokens, num_kv_heads, num_q_heads // num_kv_heads, head_dim)),
        jnp.float32,
    )
    out = jnp.full(qg.shape, 7.0, jnp.float32)  # rows of other sequences pass through
    args = (LayerKV(pages, None), md, jnp.float32, head_dim**-0.5, None, None, out)
    static = (3, 4, 5, 6)
    native = jax.jit(native_attention.paged_prefill_attention, static_argnums=static)(qg, *args)
    expected = jax.jit(xla_prefill.prefill_attention, static_argnums=static)(qg, *args)
    np.testing.assert_allclose(native, expected, rtol=2e-4, atol=2e-5)
    assert np.all(np.asarray(native[0]) == 7.0)


# -- which prefill the "cpu" backend takes -----------------------------------------------


@pytest.mark.parametrize("isa, expected", [("avx512", "native"), ("avx2", "native"), (None, "xla")])
def test_prefill_path_follows_the_cpu_unless_forced(monkeypatch, isa, expected):
    monkeypatch.delenv(native_attention.PREFILL_ENV, raising=False)
    monkeypatch.setattr(native_attention, "vector_isa", lambda: isa)
    assert native_attention.prefill_path() == expected
    for forced in native_attention.PREFILL_PATHS:
        monkeypatch.setenv(native_attention.PREFILL_ENV, forced)
        assert native_attention.prefill_path() == forced
    monkeypatch.setenv(native_attention.PREFILL_ENV, "fast")
    with pytest.raises(ValueError, match="CLAIMBENCH_NATIVE_PREFILL='fast'"):
        native_attention.prefill_path()


@pytest.mark.slow
@pytest.mark.parametrize("prefill", native_attention.PREFILL_PATHS)
def test_the_chosen_prefill_is_the_one_traced(monkeypatch, prefill):
    """The path not chosen is never called: each stand-in raises if it is traced."""
    calls = []
    for path, module, name in (
        ("native", native_attention, "paged_prefill_attention"),
        ("xla", native_attention.xla_prefill, "prefill_attention"),
    ):
        real = getattr(module, name)

        def traced(*args, _real=real, _path=path, **kwargs):
            calls.append(_path)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, traced)
    q, k, v, cache, md, _, _ = ref.build_case(ref.CASES["mixed"])
    monkeypatch.setenv(native_attention.PREFILL_ENV, prefill)
    native_attention.ragged_paged_attention(q, k, v, cache, md, sm_scale=ref.SM_SCALE)
    assert calls == [prefill]
