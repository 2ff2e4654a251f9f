"""Speculative decoding through the engine: greedy output identical to plain decoding with
both proposers, stops inside an accepted run, service per accepted token, the prefix cache."""

import dataclasses

import numpy as np
import pytest
from engine_helpers import shared_tiny_engine, tiny_config, tiny_engine, tiny_model

from claimbench.engine.build import build_engine
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.sched.fairness import OUTPUT_PREFIX

GREEDY = SamplingParams(max_tokens=20, ignore_eos=True)


def prompts(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 97, size=n).tolist() for n in lengths]


# A prompt that repeats itself, so prompt lookup has something to find.
REPEATING = [5, 6, 7, 8, 9, 10, 11] * 5


@pytest.fixture
def plain():
    return shared_tiny_engine()


def spec_engine(speculative, draft_seed=None, **overrides):
    """The tiny engine with speculation; the draft is the target itself (seed 0: every draft
    accepted) or another random model (rejections nearly always)."""
    config = tiny_config(speculative=speculative, num_spec_tokens=4, **overrides)
    draft = None if draft_seed is None else tiny_model(draft_seed)
    return build_engine(config, model=tiny_model(), draft_model=draft)


PROPOSERS = [("ngram", None), ("draft", 0), ("draft", 1)]


@pytest.mark.slow
@pytest.mark.parametrize(("speculative", "draft_seed"), PROPOSERS)
def test_greedy_output_is_identical_at_batch_1_and_mixed(plain, speculative, draft_seed):
    engine = spec_engine(speculative, draft_seed)
    batch = [REPEATING, *prompts([5, 40, 17, 2], seed=1)]
    params = [GREEDY, *(SamplingParams(max_tokens=n, ignore_eos=True) for n in (3, 20, 7, 12))]
    expected = [o.token_ids for o in plain.generate(batch, params)]
    assert engine.generate([batch[0]], params[0])[0].token_ids == expected[0]
    assert [o.token_ids for o in engine.generate(batch, params)] == expected
    steps = engine.steps_frame()
    assert steps["num_draft_tokens"].sum() > 0
    accepted = steps["num_accepted_tokens"].sum()
    if draft_seed == 0:  # the target drafting for itself: every draft accepted
        assert accepted == steps["num_draft_tokens"].sum()
    # Service charged per emitted token: the ledger's outputs are the requests' outputs.
    served = engine.steps_frame()[OUTPUT_PREFIX + "default"].iloc[-1]
    assert served == engine.requests_frame()["output_tokens"].sum()
    assert engine.block_manager.num_used_pages == 0


@pytest.mark.slow
@pytest.mark.parametrize(("speculative", "draft_seed"), PROPOSERS)
def test_greedy_output_survives_preemption(plain, speculative, draft_seed):
    # 31 usable pages of 8 tokens; six requests of up to 15 pages each cannot all fit.
    batch = prompts([90, 85, 80, 75, 70, 65], seed=3)
    batch[0] = REPEATING * 2 + batch[0][:20]
    params = SamplingParams(max_tokens=30, ignore_eos=True)
    expected = [o.token_ids for o in plain.generate(batch, params)]
    engine = spec_engine(speculative, draft_seed, num_pages=32)
    assert [o.token_ids for o in engine.generate(batch, params)] == expected
    assert engine.requests_frame()["num_preemptions"].sum() > 0
    assert engine.block_manager.num_used_pages == 0


@pytest.mark.parametrize(("speculative", "draft_seed"), [("ngram", None), ("draft", 1)])
def test_prefix_cache_holds_only_verified_tokens(plain, speculative, draft_seed):
    engine = spec_engine(speculative, draft_seed, prefix_caching="shared")
    first = engine.generate([REPEATING], GREEDY)[0]
    assert (
        engine.steps_frame()["num_draft_tokens"].sum()
        > engine.steps_frame()["num_accepted_tokens"].sum()
    )  # drafts were rejected, their K/V written into pages past the verified tokens
    # Every cached block names exactly the tokens the sequence has at that block.
    sequence = first.prompt_token_ids + first.token_ids
    page_size = engine.config.cache.page_size
    blocks = [
        engine.block_manager.pool._by_page[p]
        for p in range(engine.runner.num_pages)
        if engine.block_manager.pool.is_cached(p)
    ]
    assert blocks
    starts = {b.serial: 0 for b in blocks if b.parent_serial is None}
    for block in sorted(blocks, key=lambda b: b.serial):
        start = starts[block.serial]
        assert list(block.token_ids) == sequence[start : start + page_size]
        starts.update(
            {c.serial: start + page_size for c in blocks if c.parent_serial == block.serial}
        )
    # A continuation served from those blocks decodes exactly as without any cache.
    follow = sequence + [12, 13]
    out = engine.generate([follow], GREEDY)[0]
    assert engine.requests_frame()["prefix_hit_tokens"].iloc[-1] >= 40
    assert out.token_ids == plain.generate([follow], GREEDY)[0].token_ids


@pytest.mark.parametrize(("speculative", "draft_seed"), [("ngram", None), ("draft", 0)])
def test_a_stop_token_inside_an_accepted_run_stops_there(plain, speculative, draft_seed):
    full = plain.generate([REPEATING], GREEDY)[0].token_ids
    # With every draft accepted (k = 4) the prefill emits output 0 and the first verify step
    # outputs 1..5: a stop token at 2, 3 or 4 sits inside that run. It must not occur earlier.
    index = next(i for i in (2, 3, 4) if full[i] not in full[:i])
    params = dataclasses.replace(GREEDY, stop_token_ids=(full[index],))
    engine = spec_engine(speculative, draft_seed)
    out = engine.generate([REPEATING], params)[0]
    assert out.token_ids == full[: index + 1] and out.finish_reason == "stop"
    if draft_seed == 0:
        # The run that held the stop token had accepted tokens after it, dropped.
        steps = engine.steps_frame()
        sampling_steps = len(steps) - 1  # the first prefill chunk samples nothing
        assert steps["num_accepted_tokens"].sum() + sampling_steps > len(out.token_ids)


def test_max_tokens_caps_the_drafts_and_the_output(plain):
    engine = spec_engine("draft", 0)
    for max_tokens in (1, 2, 3, 6):
        params = dataclasses.replace(GREEDY, max_tokens=max_tokens)
        out = engine.generate([REPEATING], params)[0]
        assert out.token_ids == plain.generate([REPEATING], params)[0].token_ids
        assert out.finish_reason == "length" and len(out.token_ids) == max_tokens


def test_seeded_sampling_runs_and_reports_acceptance():
    engine = spec_engine("draft", 0)
    hot = SamplingParams(max_tokens=16, temperature=0.8, top_k=20, seed=7, ignore_eos=True)
    outs = engine.generate(prompts([9, 30], seed=4), [hot, GREEDY])
    assert [len(o.token_ids) for o in outs] == [16, 20]
    steps = engine.steps_frame()
    # The target as its own draft: p == q, so nearly every draft is accepted.
    assert steps["num_accepted_tokens"].sum() >= 0.9 * steps["num_draft_tokens"].sum()
    per_pos = np.stack(steps["accepted_per_pos"].to_numpy())
    assert per_pos.shape[1] == 4 and (np.diff(per_pos, axis=1) <= 0).all()


def test_a_draft_with_another_vocabulary_is_refused():
    from engine_helpers import TINY_MODEL

    other = dataclasses.replace(TINY_MODEL, vocab_size=150)
    config = tiny_config(speculative="draft")
    with pytest.raises(ValueError, match=r"vocabulary \(150\) is larger than the target's \(97\)"):
        build_engine(config, model=tiny_model(), draft_model=tiny_model(0, other))


def test_a_draft_with_another_tokenizer_is_refused():
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    from claimbench.engine.spec.draft_model import check_draft
    from claimbench.models.tokenizer import Tokenizer

    def word_level(words):
        return Tokenizer(
            HFTokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, "a")), 0, 1
        )

    target = tiny_model().cfg
    check_draft(target, target, word_level("abc"), word_level("abc"))  # the same: accepted
    # Same size, but id 1 means "c" to the draft and "b" to the target.
    with pytest.raises(ValueError, match="draft model's tokenizer differs from the target's"):
        check_draft(target, target, word_level("acb"), word_level("abc"))


@pytest.mark.slow
def test_precompile_covers_the_draft_steps():
    from claimbench.engine.spec.draft_steps import catch_up_step, propose_steps

    engine = spec_engine("draft", 1, max_model_len=64)  # a block-table width of its own
    num, seconds = engine.precompile()
    # Target: buckets (16, 8) and (32, 8); draft: both pairs, each the catch-up step alone and
    # the whole proposal at the one seq bucket.
    assert num == 6 and seconds > 0
    compiled = catch_up_step._cache_size(), propose_steps._cache_size()
    engine.generate(prompts([5, 40, 17], seed=6), SamplingParams(max_tokens=9, ignore_eos=True))
    assert engine.steps_frame()["num_drafts"].sum() > 0
    assert (catch_up_step._cache_size(), propose_steps._cache_size()) == compiled


@pytest.mark.slow
@pytest.mark.parametrize(("speculative", "draft_seed"), [("ngram", None), ("draft", 1)])
def test_greedy_output_is_identical_through_the_xla_verify_path(speculative, draft_seed):
    """The "xla" backend attends verify chunks in kernels/xla_verify.py (the draft's catch-up
    chunks too); a prompt longer than a verify chunk still prefills through the prefill path
    in the same steps."""
    xla_plain = tiny_engine(attention_backend="xla")
    engine = spec_engine(speculative, draft_seed, attention_backend="xla")
    batch = [REPEATING, *prompts([5, 40, 17, 2], seed=1)]
    params = [GREEDY, *(SamplingParams(max_tokens=n, ignore_eos=True) for n in (3, 20, 7, 12))]
    expected = [o.token_ids for o in xla_plain.generate(batch, params)]
    assert [o.token_ids for o in engine.generate(batch, params)] == expected
    assert engine.steps_frame()["num_draft_tokens"].sum() > 0
