"""The native dense kernel against its jnp reference, and the packed model in the engine.

Kernel: shapes on and off the register tile (12 rows by a 32-column panel with AVX-512, 6 by
16 with AVX2; a panel zero-padded, tiles of every height, row blocks past 96 rows), rows
independent of the batch they come in, shapes that disagree refused; the same for the gated
product (silu(x @ gate) * (x @ up), gate and up packed together). Model: a packed copy
computes the unpacked model's logits, the engine serves the same greedy tokens on either
matmul, and which one it uses follows the CPU, the dtype and ``CLAIMBENCH_NATIVE_DENSE``.
"""

from __future__ import annotations

import dataclasses
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import TINY_MODEL, tiny_engine, tiny_model
from flax import nnx

from claimbench.engine.sampling_params import SamplingParams
from claimbench.kernels import native_attention, native_dense
from claimbench.models import packed
from claimbench.models.quantize import quantize_weights

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: the native kernel cannot be built here",
)

dense = jax.jit(native_dense.dense, static_argnums=2)


def random(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def test_the_kernel_builds_here():
    assert native_dense.unavailable_reason() is None
    assert native_dense.panel_width() == (32 if native_attention.has_avx512() else 16)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 100, 256])
def test_pack_lays_out_panels_and_unpacks(n):
    w = random((7, n), 0)
    p = native_dense.pack(w)
    panel = native_dense.panel_width()
    assert p.shape == (-(-n // panel), 7, panel)
    j = min(n - 1, 40)  # column j is lane j % panel of panel j // panel
    np.testing.assert_array_equal(p[j // panel, :, j % panel], w[:, j])
    np.testing.assert_array_equal(native_dense.unpack(p, n), w)
    # The last panel's columns past n are zero, so they add nothing.
    assert not np.any(np.asarray(p).transpose(1, 0, 2).reshape(7, -1)[:, n:])


@pytest.mark.slow
@pytest.mark.parametrize(
    "m,k,n",
    [
        (1, 1, 1),
        (5, 7, 33),
        (11, 64, 32),
        (12, 64, 64),
        (13, 256, 100),
        (64, 256, 256),
        (97, 96, 31),
        (200, 256, 768),
        (300, 768, 65),
    ],
)
def test_matches_the_reference(m, k, n):
    x, w = random((m, k), m), random((k, n), k + n)
    p = native_dense.pack(w)
    got = np.asarray(dense(x, p, n))
    want = np.asarray(native_dense.reference(x, p, n))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.sqrt(k))


def test_leading_dims_are_kept():
    x, w = random((3, 5, 64), 1), random((64, 40), 2)
    p = native_dense.pack(w)
    got = dense(x, p, 40)
    assert got.shape == (3, 5, 40)
    np.testing.assert_array_equal(got.reshape(15, 40), dense(x.reshape(15, 64), p, 40))


@pytest.mark.parametrize("m", [64, 200])
def test_a_row_does_not_depend_on_its_batch(m):
    """Bitwise: row i alone, in its batch, and in a batch shifted by 7 rows."""
    x, w = random((m, 256), 3), random((256, 300), 4)
    p = native_dense.pack(w)
    whole = np.asarray(dense(x, p, 300))
    shifted = np.asarray(dense(jnp.concatenate([random((7, 256), 5), x]), p, 300))[7:]
    np.testing.assert_array_equal(whole, shifted)
    for i in (0, 11, m // 2, m - 1):
        np.testing.assert_array_equal(whole[i], np.asarray(dense(x[i : i + 1], p, 300))[0])


def test_shapes_that_disagree_are_refused():
    x, p = random((4, 64), 0), native_dense.pack(random((64, 40), 1))
    with pytest.raises(ValueError, match="do not make"):
        native_dense.dense(x, p, 40 + native_dense.panel_width())  # one panel more
    with pytest.raises(ValueError, match="do not make"):
        native_dense.dense(random((4, 63), 2), p, 40)
    with pytest.raises(ValueError, match="weight \\[K, N\\]"):
        native_dense.pack(random((2, 3, 4), 3))
    # The kernel checks what it is given too (an FFI call that skips the Python checks).
    wide = (4, 40 + native_dense.panel_width())
    call = jax.ffi.ffi_call(native_dense.TARGET, jax.ShapeDtypeStruct(wide, jnp.float32))
    with pytest.raises(Exception, match="dense: need x"):
        jax.block_until_ready(call(x, p))


gated = jax.jit(native_dense.dense_gated, static_argnums=2)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100])
def test_pack_gated_lays_gate_then_up_in_each_panel(n):
    gate, up = random((5, n), 0), random((5, n), 1)
    p = native_dense.pack_gated(gate, up)
    half = native_dense.panel_width() // 2
    assert p.shape == (-(-n // half), 5, 2 * half)
    j = n - 1  # column j: lane j % half of panel j // half, its up column H lanes on
    np.testing.assert_array_equal(p[j // half, :, j % half], gate[:, j])
    np.testing.assert_array_equal(p[j // half, :, half + j % half], up[:, j])
    # The padding columns past n are zero in both halves.
    assert not np.any(np.asarray(p[:, :, :half]).transpose(1, 0, 2).reshape(5, -1)[:, n:])
    assert not np.any(np.asarray(p[:, :, half:]).transpose(1, 0, 2).reshape(5, -1)[:, n:])


@pytest.mark.parametrize(
    "m,k,n", [(1, 1, 1), (5, 7, 17), (12, 64, 64), (13, 256, 100), (64, 256, 768), (200, 96, 31)]
)
def test_gated_matches_the_reference(m, k, n):
    x = random((m, k), m) * 2
    gate, up = random((k, n), k) * 0.3, random((k, n), n) * 0.3
    got = np.asarray(gated(x, native_dense.pack_gated(gate, up), n))
    want = np.asarray(native_dense.gated_reference(x, gate, up))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.sqrt(k))


def test_gated_rows_do_not_depend_on_their_batch():
    x, p = random((100, 64), 3), native_dense.pack_gated(random((64, 50), 4), random((64, 50), 5))
    whole = np.asarray(gated(x, p, 50))
    shifted = np.asarray(gated(jnp.concatenate([random((7, 64), 6), x]), p, 50))[7:]
    np.testing.assert_array_equal(whole, shifted)
    for i in (0, 13, 99):
        np.testing.assert_array_equal(whole[i], np.asarray(gated(x[i : i + 1], p, 50))[0])


def test_gated_shapes_that_disagree_are_refused():
    x, p = random((4, 64), 0), native_dense.pack_gated(random((64, 40), 1), random((64, 40), 2))
    with pytest.raises(ValueError, match="do not make"):
        native_dense.dense_gated(x, p, 40 + native_dense.panel_width())
    with pytest.raises(ValueError, match="two weights"):
        native_dense.pack_gated(random((64, 40), 1), random((64, 41), 2))
    wide = (4, 40 + native_dense.panel_width())
    call = jax.ffi.ffi_call(native_dense.GATED_TARGET, jax.ShapeDtypeStruct(wide, jnp.float32))
    with pytest.raises(Exception, match="dense_gated: need x"):
        jax.block_until_ready(call(x, p))


@pytest.mark.slow
@pytest.mark.parametrize("tied", [False, True])
def test_packed_model_computes_the_models_logits(tied):
    cfg = dataclasses.replace(TINY_MODEL, tie_word_embeddings=tied)
    model = tiny_model(cfg=cfg)
    copy = packed.pack_model(model)
    kinds = {type(m).__name__ for _, m in nnx.iter_modules(copy)}
    assert "PackedLinear" in kinds and "Linear" not in kinds
    assert "PackedMLP" in kinds and "MLP" not in kinds
    assert ("PackedEmbedding" in kinds) == tied
    # The model it was given is left as it was.
    assert any(isinstance(m, nnx.Linear) for _, m in nnx.iter_modules(model))
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, 97, (2, 9)), jnp.int32)
    want = np.asarray(model.forward_dense(tokens))
    got = np.asarray(jax.jit(lambda t: copy.forward_dense(t))(tokens))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("tied", [False, True])
def test_engine_greedy_tokens_match_on_either_matmul(monkeypatch, tied):
    rng = np.random.default_rng(0)
    # 40 tokens overflow the 32-token step budget: a prefill chunk, then a mixed chunk.
    prompts = [rng.integers(3, 97, size=n).tolist() for n in (40, 9, 3, 17)]
    greedy = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 9, 5, 7)]
    model = tiny_model(cfg=dataclasses.replace(TINY_MODEL, tie_word_embeddings=tied))
    outputs = {}
    for path in packed.DENSE_PATHS:
        monkeypatch.setenv(packed.DENSE_ENV, path)
        engine = tiny_engine(model, attention_backend="cpu")
        assert engine.runner.describe()["dense"] == path
        outputs[path] = engine.generate(prompts, greedy)
    for native, xla in zip(outputs["native"], outputs["xla"], strict=True):
        assert len(native.token_ids) == len(xla.token_ids) > 0
        assert native.token_ids == xla.token_ids


@pytest.mark.parametrize(
    ("isa", "expected"), [("avx512", "native"), ("avx2", "native"), (None, "xla")]
)
def test_dense_path_follows_the_cpu_unless_forced(monkeypatch, isa, expected):
    monkeypatch.delenv(packed.DENSE_ENV, raising=False)
    monkeypatch.setattr(packed, "vector_isa", lambda: isa)
    model = tiny_model()
    assert packed.dense_path(model) == expected
    monkeypatch.setenv(packed.DENSE_ENV, "native")
    assert packed.dense_path(model) == "native"
    monkeypatch.setenv(packed.DENSE_ENV, "xla")
    assert packed.dense_path(model) == "xla"
    monkeypatch.setenv(packed.DENSE_ENV, "blas")
    with pytest.raises(ValueError, match="CLAIMBENCH_NATIVE_DENSE='blas'"):
        packed.dense_path(model)


@pytest.mark.slow
def test_only_f32_unquantized_models_on_one_device_are_packed(monkeypatch):
    monkeypatch.setenv(packed.DENSE_ENV, "native")
    from claimbench.models.llama import LlamaForCausalLM

    bf16 = LlamaForCausalLM(TINY_MODEL, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert packed.dense_path(bf16) == "xla"
    assert packed.dense_path(quantize_weights(tiny_model(), "int8")) == "xla"
    assert tiny_engine(tiny_model(), attention_backend="xla").runner.describe()["dense"] == "xla"
    monkeypatch.setattr(native_attention, "unavailable_reason", lambda: "no compiler here")
    monkeypatch.setattr(native_dense, "unavailable_reason", lambda: "no compiler here")
    assert packed.dense_path(tiny_model()) == "xla"


@pytest.mark.slow
def test_packed_weights_count_the_head_copy_and_padding(monkeypatch):
    model = tiny_model()
    info = {}
    for path in packed.DENSE_PATHS:
        monkeypatch.setenv(packed.DENSE_ENV, path)
        runner = tiny_engine(model, attention_backend="cpu").runner
        info[path] = (runner.weight_bytes, runner.describe()["weight_bytes_per_device"])
    # The model's own weights are what they were; the device holds the packed layout too.
    assert info["native"][0] == info["xla"][0] == info["xla"][1]
    cfg = TINY_MODEL
    panel = native_dense.panel_width()
    pad = lambda n: -(-n // panel) * panel  # noqa: E731
    d, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    linear = [(d, cfg.num_heads * hd), (d, cfg.num_kv_heads * hd), (d, cfg.num_kv_heads * hd)]
    linear += [(cfg.num_heads * hd, d), (f, d)]
    # Gate and up are packed together, each padded to half a panel (PackedMLP).
    pad_half = lambda n: -(-n // (panel // 2)) * (panel // 2)  # noqa: E731
    gated = 2 * d * (pad_half(f) - f)
    padding = cfg.num_layers * (sum(k * (pad(n) - n) for k, n in linear) + gated)
    # A tied head is packed beside the table; an untied one is a Linear like the others.
    v = cfg.vocab_size
    head = d * pad(v) if cfg.tie_word_embeddings else d * (pad(v) - v)
    assert info["native"][1] == info["xla"][1] + 4 * (padding + head)
