"""The native greedy kernel against its jnp reference, and in the sampler and the engine.

Kernel: each row's greedy token equals the reference's (ties to the first index, rows of
any width on and off the vector lanes, -inf and +inf rows), its log-sum-exp matches to
rounding, a row's result does not depend on the rows beside it, a row holding a NaN gives
V - 1 and NaN. Sampler and engine: the same tokens and log-probs to rounding on either path,
and which path a runner takes follows its matmuls and ``CLAIMBENCH_NATIVE_SAMPLER``.
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import tiny_engine

from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.worker.sampler import SAMPLER_ENV, SamplingBatch, sample, sampler_path
from claimbench.kernels import native_greedy
from claimbench.models.packed import DENSE_ENV

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: the native kernel cannot be built here",
)

kernel = jax.jit(native_greedy.greedy_logsumexp)


def logits_with_edges(rows: int, vocab: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, vocab)).astype(np.float32) * 4
    x[0, vocab // 3] = x[0, vocab - 1] = 99.0  # a tie: the first index wins
    x[1, :] = -np.inf
    x[2, vocab // 2] = np.inf
    x[3, :] = 0.5  # all equal: index 0
    return x


@pytest.mark.parametrize("vocab", [1, 7, 8, 9, 33, 4096])
def test_tokens_equal_and_logsumexp_matches_the_reference(vocab):
    x = jnp.asarray(logits_with_edges(6, vocab, vocab))
    tokens, lse = kernel(x)
    ref_tokens, ref_lse = native_greedy.reference(x)
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_allclose(lse, ref_lse, rtol=2e-6, atol=1e-6)
    assert tokens[0] == (0 if vocab == 1 else vocab // 3)


def test_a_wide_vocabulary_sums_to_double_precision():
    # 152k logits (Qwen's vocabulary): each lane's f32 partial sum folds into the double
    # total every 256 vectors; summed in f32 over all ~19k vectors it drifted by ~1e-5.
    x = np.random.default_rng(5).standard_normal((4, 152_064)).astype(np.float32) * 3
    x[1] -= 40.0  # a shifted row: the sum is taken around the max
    _, lse = kernel(jnp.asarray(x))
    wide = x.astype(np.float64)
    top = wide.max(axis=1, keepdims=True)
    exact = np.log(np.exp(wide - top).sum(axis=1)) + top[:, 0]
    np.testing.assert_allclose(np.asarray(lse, np.float64), exact, rtol=0, atol=3e-6)


def test_a_row_does_not_depend_on_its_batch():
    x = logits_with_edges(64, 4096, 1)
    tokens, lse = kernel(jnp.asarray(x))
    for r in (0, 5, 63):
        alone_t, alone_l = kernel(jnp.asarray(x[r : r + 1]))
        assert tokens[r] == alone_t[0]
        np.testing.assert_array_equal(lse[r], alone_l[0])


def test_a_row_holding_a_nan_gives_the_last_index_and_nan():
    x = logits_with_edges(4, 100, 2)
    x[2, 40] = np.nan
    tokens, lse = kernel(jnp.asarray(x))
    assert tokens[2] == 99 and np.isnan(lse[2])
    assert tokens[0] == 33 and np.isfinite(lse[0])


def test_shapes_it_cannot_take_are_refused():
    with pytest.raises(ValueError, match="logits"):
        native_greedy.greedy_logsumexp(jnp.zeros((4,), jnp.float32))
    with pytest.raises(ValueError, match="logits"):
        native_greedy.greedy_logsumexp(jnp.zeros((4, 0), jnp.float32))


def _batch(rows: int, temperature: float) -> SamplingBatch:
    return SamplingBatch(
        temperature=jnp.full(rows, temperature),
        top_k=jnp.zeros(rows, jnp.int32),
        top_p=jnp.ones(rows),
        seeds=jnp.arange(rows, dtype=jnp.uint32),
        output_index=jnp.zeros(rows, jnp.int32),
        all_greedy=jnp.asarray(temperature == 0.0),
    )


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_sampler_draws_the_same_tokens_on_either_path(temperature):
    x = jnp.asarray(np.random.default_rng(3).standard_normal((16, 512)).astype(np.float32))
    batch = _batch(16, temperature)
    native = jax.jit(lambda x, b: sample(x, b, True))(x, batch)
    xla = jax.jit(lambda x, b: sample(x, b, False))(x, batch)
    np.testing.assert_array_equal(native[0], xla[0])
    np.testing.assert_allclose(native[1], xla[1], rtol=2e-6, atol=2e-6)


def test_the_path_follows_the_matmuls_and_the_environment(monkeypatch):
    monkeypatch.delenv(SAMPLER_ENV, raising=False)
    assert sampler_path("native", jnp.float32) == "native"
    assert sampler_path("xla", jnp.float32) == "xla"
    # A batch-invariant bf16 model has native matmuls but bf16 logits: XLA reduces them.
    assert sampler_path("native", jnp.bfloat16) == "xla"
    monkeypatch.setenv(SAMPLER_ENV, "xla")
    assert sampler_path("native", jnp.float32) == "xla"
    monkeypatch.setenv(SAMPLER_ENV, "fast")
    with pytest.raises(ValueError, match=SAMPLER_ENV):
        sampler_path("native", jnp.float32)


def test_engine_greedy_tokens_match_on_either_sampler(monkeypatch):
    prompts = [[5, 9, 13, 2], [7, 7, 7, 7, 7, 7, 1], [3]]
    params = SamplingParams(max_tokens=6, ignore_eos=True, logprobs=True)
    outs = {}
    monkeypatch.setenv(DENSE_ENV, "native")  # the native sampler goes with native matmuls
    for path in ("native", "xla"):
        monkeypatch.setenv(SAMPLER_ENV, path)
        engine = tiny_engine(attention_backend="cpu")
        assert engine.runner.describe()["sampler"] == path
        outs[path] = engine.generate(prompts, params)
    for a, b in zip(outs["native"], outs["xla"], strict=True):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=2e-6, atol=2e-6)
