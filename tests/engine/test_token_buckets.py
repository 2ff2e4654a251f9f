"""Configured token buckets: steps pad to them, the runner compiles exactly their pairs, and
greedy float32 outputs are the powers-of-two engine's."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.engine.config import EngineConfig
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.worker.buckets import bucket_pairs, pick_pair, token_buckets


def test_default_is_powers_of_two_and_configured_buckets_replace_them():
    cfg = EngineConfig(max_num_seqs=8, max_num_batched_tokens=64)
    assert token_buckets(cfg) == (16, 32, 64)
    custom = EngineConfig(max_num_seqs=8, max_num_batched_tokens=64, token_buckets=[10, 24, 64])
    assert custom.compilation.token_buckets == (10, 24, 64)  # a YAML list becomes a tuple
    assert token_buckets(custom) == (10, 24, 64)
    # Sequence bucket 8 pairs only with token buckets >= 8; a step of 9 tokens pads to 10,
    # one of 11 to 24, one of 3 tokens over 3 sequences to the sequence bucket, then 10.
    assert bucket_pairs(custom) == [(10, 8), (24, 8), (64, 8)]
    assert pick_pair(custom, 9, 2) == (10, 8)
    assert pick_pair(custom, 11, 2) == (24, 8)
    assert pick_pair(custom, 3, 3) == (10, 8)


@pytest.mark.parametrize(
    ("buckets", "problem"),
    [
        ((16, 32), "ascend to max_num_batched_tokens=64"),
        ((32, 16, 64), "ascend"),
        ((16, 16, 64), "ascend"),
        ((0, 64), "integers >= 1"),
        ((8.5, 64), "integers >= 1"),
        ("64", "a list of token counts"),
    ],
)
def test_bad_buckets_are_refused_by_name(buckets, problem):
    with pytest.raises(ValueError, match=f"token_buckets must .*{problem}"):
        EngineConfig(max_num_seqs=8, max_num_batched_tokens=64, token_buckets=buckets)


@pytest.mark.slow
def test_an_engine_serves_at_its_configured_buckets_with_the_same_tokens():
    model = tiny_model()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 97, int(n)).tolist() for n in (5, 40, 12, 70, 3, 9)]
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    outputs, steps = {}, {}
    for name, buckets in (("pow2", ()), ("custom", (12, 20, 32))):
        engine = tiny_engine(model, token_buckets=buckets)
        num_compiled, _ = engine.runner.precompile()
        # One program per (token bucket, seq bucket 8) pair: (16, 32) or (12, 20, 32).
        assert num_compiled == len(bucket_pairs(engine.config)) == (3 if buckets else 2)
        outputs[name] = [o.token_ids for o in engine.generate(prompts, params)]
        steps[name] = engine.steps_frame()
        assert engine.stats().num_compilations == num_compiled  # serving compiled nothing
    assert set(steps["custom"]["token_bucket"]) <= {12, 20, 32}
    assert 12 in set(steps["custom"]["token_bucket"])  # decode steps of a few sequences
    assert set(steps["pow2"]["token_bucket"]) <= {16, 32}
    for frame in steps.values():
        padding = frame["token_bucket"] - frame["num_scheduled_tokens"]
        assert (frame["num_padding_tokens"] == padding).all() and (padding >= 0).all()
    # Smaller buckets pad less on the same requests; the tokens do not change (float32).
    assert steps["custom"]["num_padding_tokens"].sum() < steps["pow2"]["num_padding_tokens"].sum()
    assert outputs["custom"] == outputs["pow2"]
