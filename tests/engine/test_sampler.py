import jax
import jax.numpy as jnp
import numpy as np
import pytest

from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.worker.sampler import SamplingBatch, sample


def batch(n, *, temperature=1.0, top_k=0, top_p=1.0, seeds=None, index=None):
    def full(x, dtype):
        return jnp.asarray(np.broadcast_to(np.asarray(x, dtype), (n,)))

    temps = full(temperature, np.float32)
    return SamplingBatch(
        temperature=temps,
        top_k=full(top_k, np.int32),
        top_p=full(top_p, np.float32),
        seeds=full(np.arange(n) if seeds is None else seeds, np.uint32),
        output_index=full(0 if index is None else index, np.int32),
        all_greedy=jnp.asarray(bool(np.all(np.asarray(temps) == 0))),
    )


def random_logits(n, vocab=11, seed=0):
    return jax.random.normal(jax.random.key(seed), (n, vocab)) * 2.0


def test_greedy_is_argmax_and_logprob_is_the_models():
    logits = random_logits(5)
    tokens, lp = sample(logits, batch(5, temperature=0.0))
    np.testing.assert_array_equal(tokens, jnp.argmax(logits, -1))
    expected = jax.nn.log_softmax(logits)[jnp.arange(5), tokens]
    np.testing.assert_allclose(lp, expected, rtol=1e-6)


def test_mixed_greedy_and_sampled_rows():
    logits = random_logits(64)
    temps = np.where(np.arange(64) % 2 == 0, 0.0, 5.0)
    tokens, _ = sample(logits, batch(64, temperature=temps))
    argmax = np.asarray(jnp.argmax(logits, -1))
    np.testing.assert_array_equal(np.asarray(tokens)[::2], argmax[::2])
    assert np.any(np.asarray(tokens)[1::2] != argmax[1::2])  # hot rows do not all pick the max


def test_top_k_one_and_tiny_top_p_are_greedy():
    logits = random_logits(32)
    argmax = jnp.argmax(logits, -1)
    np.testing.assert_array_equal(sample(logits, batch(32, top_k=1))[0], argmax)
    np.testing.assert_array_equal(sample(logits, batch(32, top_p=1e-6))[0], argmax)


def test_top_k_and_top_p_restrict_the_support():
    n = 2000
    logits = jnp.tile(jnp.log(jnp.asarray([0.4, 0.3, 0.2, 0.1])), (n, 1))
    tokens = np.asarray(sample(logits, batch(n, top_k=2))[0])
    assert set(tokens) == {0, 1}
    # Mass before token 2 is 0.7 < 0.75, so tokens 0..2 stay; token 3 (0.9 before it) goes.
    tokens = np.asarray(sample(logits, batch(n, top_p=0.75))[0])
    assert set(tokens) == {0, 1, 2}


def test_sampling_follows_the_softmax():
    n = 20000
    probs = np.array([0.5, 0.25, 0.15, 0.1])
    logits = jnp.tile(jnp.log(jnp.asarray(probs)), (n, 1))
    tokens = np.asarray(sample(logits, batch(n))[0])
    freq = np.bincount(tokens, minlength=4) / n
    np.testing.assert_allclose(freq, probs, atol=0.015)  # ~4 standard errors


@pytest.mark.slow
def test_seeded_tokens_do_not_depend_on_batch_position_or_neighbours():
    logits = random_logits(1, vocab=50)[0]
    solo = sample(logits[None], batch(1, seeds=[7], index=[3]))[0][0]
    crowd_logits = jnp.concatenate([random_logits(5, vocab=50, seed=1), logits[None]])
    crowd = sample(crowd_logits, batch(6, seeds=[1, 2, 3, 4, 5, 7], index=[0, 1, 2, 3, 4, 3]))[0]
    assert int(crowd[5]) == int(solo)
    # A different output index draws a different key: over many indices tokens vary.
    many = sample(jnp.tile(logits, (40, 1)), batch(40, seeds=[7] * 40, index=np.arange(40)))[0]
    assert len(set(np.asarray(many).tolist())) > 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_tokens=0), "max_tokens"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=-1), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(seed=-3), "seed"),
    ],
)
def test_sampling_params_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.slow
def test_greedy_tokens_is_argmax_with_ties_to_the_first():
    from claimbench.engine.worker.sampler import greedy_tokens

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((16, 50)).astype(np.float32)
    logits[3, [7, 9, 40]] = 10.0  # a three-way tie
    logits[5] = 0.0  # all equal
    expected = np.argmax(logits, axis=-1)
    np.testing.assert_array_equal(np.asarray(greedy_tokens(jnp.asarray(logits))), expected)
    assert expected[3] == 7 and expected[5] == 0
