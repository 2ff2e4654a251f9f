"""Batch-invariant mode: a bf16 request's greedy tokens and log-probs are the same bits
alone and beside any co-tenants, on the CPU path; and without the mode they are not."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import TINY_MODEL, tiny_engine
from flax import nnx

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.kv_cache import kv_bytes_per_token
from claimbench.engine.sampling_params import SamplingParams
from claimbench.kernels import native_dense
from claimbench.models import packed
from claimbench.models.llama import LlamaForCausalLM

# Wide enough that XLA's bf16 dot blocks its reduction by the row count (at the test
# helpers' 64 x 128 it does not, and the mode cannot be seen to matter).
MODEL = dataclasses.replace(TINY_MODEL, hidden_size=256, intermediate_size=768, vocab_size=512)
TARGET = [3 + (i * 7) % 90 for i in range(11)]
GREEDY = SamplingParams(max_tokens=24, logprobs=True, prompt_logprobs=True, ignore_eos=True)
SEEDED = dataclasses.replace(GREEDY, temperature=1.0, seed=1234)
NEIGHBOUR = SamplingParams(max_tokens=30, ignore_eos=True)
# Co-tenant prompts: one short; three of different lengths; seven filling the sequence
# bucket of 8; twelve, past it (bucket 16), whose prompts also chunk at the token budget.
MIXES = {
    "one": [[5] * 20],
    "three": [[4 + i] * (5 + 9 * i) for i in range(3)],
    "seven": [[9 + i] * (3 + 7 * i) for i in range(7)],
    "twelve": [[20 + i] * (2 + 5 * i) for i in range(12)],
}


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return LlamaForCausalLM(MODEL, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))


def _engine(model: LlamaForCausalLM, batch_invariant: bool, async_scheduling: bool = False):
    pool = 256 * 8 * kv_bytes_per_token(MODEL, jnp.bfloat16)
    config = EngineConfig(
        dtype="bfloat16",
        kv_pool_bytes=pool,
        page_size=8,
        max_num_seqs=16,
        max_num_batched_tokens=64,
        max_model_len=128,
        async_scheduling=async_scheduling,
        batch_invariant=batch_invariant,
        kv_allocation="reserve_request",
    )
    return build_engine(config, model=model)


def _target_beside(engine, neighbours: list[list[int]], target: SamplingParams = GREEDY):
    """The target's (tokens, log-probs, prompt log-probs) served beside ``neighbours``."""
    engine.reset()
    sampling = [target] + [NEIGHBOUR] * len(neighbours)
    out = engine.generate([TARGET, *neighbours], sampling)[0]
    return out.token_ids, out.logprobs, out.prompt_logprobs


def _differing(engine, target: SamplingParams = GREEDY) -> list[str]:
    alone = _target_beside(engine, [], target)
    assert len(alone[0]) == GREEDY.max_tokens and len(alone[2]) == len(TARGET) - 1
    return [name for name, mix in MIXES.items() if _target_beside(engine, mix, target) != alone]


# Async scheduling builds a step while the last runs: it changes which step a token is in.
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_invariant_mode_gives_the_same_bits_beside_any_co_tenants(model, async_scheduling):
    engine = _engine(model, batch_invariant=True, async_scheduling=async_scheduling)
    assert engine.runner.dense == "native"
    # Lists of Python floats compare exactly: every log-prob bit-identical.
    assert _differing(engine) == []
    assert _differing(engine, SEEDED) == []  # a seeded sample's tokens and log-probs too


def test_without_the_mode_co_tenants_move_the_log_probs(model):
    engine = _engine(model, batch_invariant=False)
    assert engine.runner.dense == "xla"
    assert _differing(engine) != []


def test_xla_dot_depends_on_the_row_count_and_the_native_path_does_not():
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (64, 768), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(kw, (768, 256), jnp.float32) * 0.03).astype(jnp.bfloat16)
    dot = jax.jit(lambda a: a @ w)
    panels = native_dense.pack(w.astype(jnp.float32))
    invariant = jax.jit(lambda a: native_dense.dense(a.astype(jnp.float32), panels, 256))
    # Which row counts XLA computes alike is the host's: on a Zen 3 (AVX2) 8 and 64 rows
    # differed; on a Zen 5 (AVX-512 BF16) only 1 row (a matrix-vector product) did.
    row = {rows: np.asarray(dot(x[:rows])[0].astype(jnp.float32)) for rows in (1, 8, 64)}
    assert (row[1] != row[8]).any() or (row[8] != row[64]).any()
    same = {rows: np.asarray(invariant(x[:rows])[0]) for rows in (1, 8, 64)}
    assert (same[1] == same[8]).all() and (same[8] == same[64]).all()


def test_packed_bf16_linear_rounds_the_f32_product_to_bf16():
    bf16 = {"dtype": jnp.bfloat16, "param_dtype": jnp.bfloat16}
    linear = nnx.Linear(96, 40, use_bias=True, rngs=nnx.Rngs(1), **bf16)
    linear.bias[...] = jnp.full((40,), 0.5, jnp.bfloat16)
    x = jax.random.normal(jax.random.key(2), (3, 96), jnp.float32).astype(jnp.bfloat16)
    y = packed.PackedLinear.from_linear(linear)(x)
    w = linear.kernel[...].astype(jnp.float32)
    want = jnp.matmul(x.astype(jnp.float32), w, precision=jax.lax.Precision.HIGHEST)
    assert y.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(y, np.float32),
        np.asarray(want.astype(jnp.bfloat16) + linear.bias[...], np.float32),
        rtol=1e-2,
        atol=1e-2,
    )


@pytest.mark.parametrize(
    "options",
    [
        {"weights": "int8"},
        {"tp": 2},
        {"speculative": "ngram"},
        {"attention_backend": "xla"},
        {"attention_backend": "pallas"},
        {"early_exit_threshold": 0.9},
        {"kv_allocation": "paged"},
    ],
)
def test_options_it_cannot_make_invariant_are_refused(options):
    with pytest.raises(ValueError, match="batch_invariant"):
        EngineConfig(batch_invariant=True, **{"kv_allocation": "reserve_request", **options})
    EngineConfig(batch_invariant=False, **options)  # refused only with the mode on
    EngineConfig(batch_invariant=True, kv_allocation="reserve_max")


def test_a_co_tenant_cannot_force_a_preemption_that_moves_the_bits():
    # With pages growing per request (paged), an older co-tenant here forced the target's
    # preemption, and its recompute by the prefill kernel moved log-prob bits (tokens stayed).
    # The mode reserves a request's pages up front, so the target waits instead: no
    # preemption, and the same bits as alone.
    options = dict(page_size=4, num_pages=7, max_num_seqs=4, max_num_batched_tokens=16)
    engine = tiny_engine(
        **options,
        max_model_len=32,
        async_scheduling=False,
        batch_invariant=True,
        kv_allocation="reserve_request",
    )
    target = [37, 27, 24, 42, 40]
    for temperature in (0.0, 1.0):
        sampling = SamplingParams(
            max_tokens=16, temperature=temperature, seed=7, ignore_eos=True, logprobs=True
        )
        engine.reset()
        alone = engine.generate([target], sampling)[0]
        engine.reset()
        engine.add_request([50, 51, 52], SamplingParams(max_tokens=20, ignore_eos=True))
        mine = engine.add_request(target, sampling)
        while engine.has_unfinished:
            engine.step()
        beside = engine.output(mine)
        assert engine.requests[mine].num_preemptions == 0
        assert (beside.token_ids, beside.logprobs) == (alone.token_ids, alone.logprobs)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_batch_invariant_must_be_a_bool(value):
    with pytest.raises(ValueError, match="batch_invariant must be a bool"):
        EngineConfig(batch_invariant=value)


def test_a_host_forcing_xla_dot_refuses_the_mode(model, monkeypatch):
    monkeypatch.setenv(packed.DENSE_ENV, "xla")
    with pytest.raises(ValueError, match="batch_invariant is unavailable here"):
        packed.dense_path(model, batch_invariant=True)
