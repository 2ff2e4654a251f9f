"""The sampling seed of a request: its own when given, fresh entropy when not."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from engine_helpers import shared_tiny_engine

from claimbench.engine.config import EngineConfig
from claimbench.engine.sampling_params import SamplingParams

SAMPLED = SamplingParams(max_tokens=4, temperature=1.0, ignore_eos=True)


@pytest.fixture
def engine():
    return shared_tiny_engine(async_scheduling=False)


def _counter_seeds(base: int, num: int) -> set[int]:
    """Every seed a (base, submission number) derivation would give to the first num."""
    return {int(np.random.SeedSequence([base, n]).generate_state(1)[0]) for n in range(num)}


def test_unseeded_requests_draw_seeds_no_counter_predicts(engine):
    engine.reset()
    seeds = [engine.requests[engine.add_request([3, 4], SAMPLED)].seed for _ in range(16)]
    engine.reset()  # a second engine's life: the same submission numbers again
    seeds += [engine.requests[engine.add_request([3, 4], SAMPLED)].seed for _ in range(16)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**32 for s in seeds)
    # Not derived from a shared counter under any small engine seed.
    assert not set(seeds) & set().union(*(_counter_seeds(base, 64) for base in range(4)))


def test_seeded_requests_are_reproducible(engine):
    seeded = dataclasses.replace(SAMPLED, seed=1234)
    engine.reset()
    first = engine.generate([[3, 4, 5]], seeded)[0].token_ids
    engine.reset()
    engine.add_request([7, 8, 9], SAMPLED)  # an unseeded neighbour changes nothing
    again = engine.generate([[3, 4, 5]], seeded)[0].token_ids
    assert first == again and len(first) == 4
    assert engine.requests[engine.add_request([3], seeded)].seed == 1234


def test_an_engine_seed_derives_unseeded_seeds_reproducibly(engine):
    engine.reset(dataclasses.replace(engine.config, seed=5))
    seeds = [engine.requests[engine.add_request([3, 4], SAMPLED)].seed for _ in range(3)]
    assert set(seeds) <= _counter_seeds(5, 3) and len(set(seeds)) == 3
    engine.reset(dataclasses.replace(engine.config, seed=None))


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_engine_seed_must_be_a_non_negative_integer(seed):
    with pytest.raises(ValueError, match="seed"):
        EngineConfig(seed=seed)
