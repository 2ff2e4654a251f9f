"""The native CPU decode kernel against the XLA decode attention, and the "cpu" backend.

Random pages in every storage format the kernel reads (f32, f16, bf16 and fp8 as values
or as bit containers, int8 with per-row scales), random block tables, contexts that end
mid-page and on page boundaries, padding slots past the decode group, GQA groups of 1, 2
and 4, sliding window and soft cap. Then the whole engine: greedy tokens on the "cpu"
backend equal those on the "xla" backend.
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.engine.sampler import SamplingParams
from claimbench.kernels import backend, native_decode
from claimbench.kernels.kv_quant import FP8_DTYPE, LayerKV, to_container
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


def random_cache(storage: str, rows: int, head_dim: int, rng) -> LayerKV:
    shape = (NUM_PAGES, PAGE_SIZE, rows, head_dim)
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
        scales = jnp.asarray(rng.uniform(0.001, 0.02, shape[:3]), jnp.float32)
        return LayerKV(pages, scales)
    raise ValueError(storage)


def decode_case(lens, num_slots, num_q_heads, rows, head_dim, storage, seed=0):
    """q f32[num_slots, Hkv, G, D], cache, md: slots past len(lens) are padding."""
    rng = np.random.default_rng(seed)
    cache = random_cache(storage, rows, head_dim, rng)
    table = np.full((num_slots, PAGES_PER_SEQ), NULL_PAGE, np.int32)
    pages = rng.permutation(np.arange(1, NUM_PAGES))
    used = 0
    for i, n in enumerate(lens):
        k = -(-n // PAGE_SIZE)
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
    native = jax.jit(lambda q, c, m: native_decode.paged_decode_attention(q, c, m, *args))
    xla = jax.jit(lambda q, c, m: decode_attention(q, c, m, *args))
    return np.asarray(native(q, cache, md)), np.asarray(xla(q, cache, md))


def test_the_kernel_builds_here():
    assert native_decode.unavailable_reason() is None
    assert backend.resolve_backend_name("auto") == "cpu"


LENS = [1, PAGE_SIZE, PAGE_SIZE + 1, 2 * PAGE_SIZE - 1, PAGE_SIZE * PAGES_PER_SEQ, 7]


@pytest.mark.parametrize("storage", ["f32", "f16", "bf16", "bf16-bits", "int8", "fp8", "fp8-bits"])
def test_matches_xla_decode_for_every_storage(storage):
    q, cache, md = decode_case(LENS, len(LENS) + 2, 4, 4, 16, storage)
    native, xla = both(q, cache, md, 0.25)
    np.testing.assert_allclose(native, xla, rtol=2e-4, atol=2e-5)
    assert np.all(native[len(LENS) :] == 0.0)  # padding slots


@pytest.mark.parametrize("num_q_heads, rows", [(2, 4), (4, 4), (8, 4), (4, 8)])
@pytest.mark.parametrize("head_dim", [8, 64, 80])
def test_gqa_groups_and_head_dims(num_q_heads, rows, head_dim):
    q, cache, md = decode_case(LENS, len(LENS), num_q_heads, rows, head_dim, "f32", seed=1)
    native, xla = both(q, cache, md, head_dim**-0.5)
    np.testing.assert_allclose(native, xla, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("window", [1, 3, PAGE_SIZE, 9])
def test_sliding_window_and_soft_cap(window):
    q, cache, md = decode_case(LENS, len(LENS) + 1, 4, 4, 16, "f32", seed=2)
    native, xla = both(q * 4, cache, md, 0.25, sliding_window=window, soft_cap=3.0)
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
    monkeypatch.setattr(native_decode, "unavailable_reason", lambda: "no compiler here")
    assert backend.resolve_backend_name("auto") == "xla"
    with pytest.raises(ValueError, match="unavailable: no compiler here"):
        backend.resolve_backend_name("cpu")


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
