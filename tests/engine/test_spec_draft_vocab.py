"""A draft whose vocabulary is a prefix of the target's (one tokenizer, the target's embedding
padded with rows no token uses): it proposes, greedy and seeded sampled output stay plain
decoding's; a larger or foreign vocabulary is refused in one line."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import TINY_MODEL, shared_tiny_engine, tiny_config, tiny_model
from flax import nnx

from claimbench.engine.build import build_engine
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.spec.draft_model import check_draft
from claimbench.models.llama import LlamaForCausalLM

DRAFT_VOCAB = 80  # the target's 97 ids, less the last 17


def truncated(target: LlamaForCausalLM, vocab: int) -> LlamaForCausalLM:
    """The target itself with only its first ``vocab`` embedding and output rows: the same
    ids mean the same tokens, and it guesses the target's token whenever that is below
    ``vocab``."""
    cfg = dataclasses.replace(target.cfg, vocab_size=vocab)
    graphdef, state = nnx.split(LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)))
    _, full = nnx.split(target)
    rows = jax.tree.map(lambda d, t: t[tuple(slice(0, n) for n in d.shape)], state, full)
    return nnx.merge(graphdef, rows)


def prefix_engine(**overrides):
    config = tiny_config(speculative="draft", num_spec_tokens=4, **overrides)
    draft = truncated(tiny_model(), DRAFT_VOCAB)
    return build_engine(config, model=tiny_model(), draft_model=draft)


def prompts(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 97, size=n).tolist() for n in lengths]


@pytest.mark.slow
def test_greedy_output_with_a_smaller_draft_vocabulary_is_plain_decodings():
    batch = prompts([5, 40, 17, 2, 9], seed=1)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (20, 20, 7, 12, 30)]
    expected = [o.token_ids for o in shared_tiny_engine().generate(batch, params)]
    engine = prefix_engine()
    outs = [o.token_ids for o in engine.generate(batch, params)]
    assert outs == expected
    # The random target does emit ids the draft has no row for (fed to it clamped).
    assert any(t >= DRAFT_VOCAB for out in outs for t in out)
    steps = engine.steps_frame()
    drafted, accepted = steps["num_draft_tokens"].sum(), steps["num_accepted_tokens"].sum()
    # The target's own layers: every guess right but where the target's token is past 80.
    assert 0 < accepted < drafted


@pytest.mark.slow
def test_seeded_sampled_output_with_a_smaller_draft_vocabulary_is_plain_decodings():
    engine = prefix_engine()
    hot = SamplingParams(max_tokens=16, temperature=0.8, seed=7, ignore_eos=True)
    batch = prompts([9, 30], seed=4)
    outs = [o.token_ids for o in engine.generate(batch, [hot, hot])]
    assert outs == [o.token_ids for o in shared_tiny_engine().generate(batch, [hot, hot])]
    assert all(0 <= t < TINY_MODEL.vocab_size for out in outs for t in out)
    steps = engine.steps_frame()
    assert 0 < steps["num_accepted_tokens"].sum() <= steps["num_draft_tokens"].sum()


@pytest.mark.slow
def test_a_larger_or_foreign_draft_vocabulary_is_refused_in_one_line():
    larger = dataclasses.replace(TINY_MODEL, vocab_size=120)
    config = tiny_config(speculative="draft")
    with pytest.raises(ValueError, match=r"vocabulary \(120\) is larger than the target's \(97\)"):
        build_engine(config, model=tiny_model(), draft_model=tiny_model(0, larger))
    smaller = dataclasses.replace(TINY_MODEL, vocab_size=DRAFT_VOCAB)
    check_draft(smaller, TINY_MODEL, None, None)  # a prefix: accepted
    other_eos = dataclasses.replace(smaller, eos_token_id=3)
    with pytest.raises(ValueError, match=r"eos_token_id \(3\) differs from the target's \(2\)"):
        check_draft(other_eos, TINY_MODEL, None, None)
    for err in (larger, other_eos):
        with pytest.raises(ValueError) as info:
            check_draft(err, TINY_MODEL, None, None)
        assert "\n" not in str(info.value)
