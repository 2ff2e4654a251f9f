"""Engine stats and the reserve_max allocation mode: pages held against tokens computed."""

from __future__ import annotations

import dataclasses

import pytest
from engine_helpers import tiny_engine

from claimbench.engine.config import EngineConfig
from claimbench.engine.sampling_params import SamplingParams

# 64 pages of 8 slots (the null page among them), max_model_len 128 = 16 pages per reservation.
PROMPTS = [list(range(3, 3 + n)) for n in (5, 12, 20)]
SAMPLING = SamplingParams(max_tokens=3, ignore_eos=True)


def _first_step(engine):
    for prompt in PROMPTS:
        engine.add_request(prompt, SAMPLING)
    engine.step()
    return engine.stats()


def _engine():
    # Synchronous: the stats after one step() see that step's tokens computed (with async
    # scheduling the step is still in flight).
    return tiny_engine(prefix_caching="off", max_num_batched_tokens=64, async_scheduling=False)


@pytest.mark.slow
def test_paged_holds_the_pages_of_the_computed_tokens():
    engine = _engine()
    stats = _first_step(engine)
    # Prompts of 5, 12 and 20 tokens computed in one step: 1 + 2 + 3 pages of 8 slots.
    assert (stats.num_running, stats.num_waiting) == (3, 0)
    assert stats.num_used_pages == 6
    assert (stats.num_held_slots, stats.num_filled_slots) == (48, 37)
    assert stats.num_usable_pages == 63
    # f32 pages of 2 layers x 4 K/V rows x 16 dims x 4 bytes = 512 B per token, 64 pages of 8.
    assert stats.kv_bytes_per_token == 512
    assert stats.kv_cache_bytes == 64 * 8 * 512
    while engine.has_unfinished:
        engine.step()
    assert engine.stats().num_used_pages == 0


def test_reserve_max_takes_max_model_len_at_admission():
    engine = _engine()
    engine.reset(dataclasses.replace(engine.config, kv_allocation="reserve_max"))
    stats = _first_step(engine)
    # Each admitted request reserves 128 slots = 16 pages; 63 usable pages admit 3 of them.
    assert stats.num_running == 3
    assert stats.num_used_pages == 48
    assert (stats.num_held_slots, stats.num_filled_slots) == (3 * 128, 37)
    engine.add_request(PROMPTS[0], SAMPLING)
    engine.step()
    assert engine.stats().num_waiting == 1  # 15 free pages: no room for a fourth reservation
    outputs = [engine.step() for _ in range(20)]
    assert any(outputs) and not engine.has_unfinished
    assert engine.stats().num_used_pages == 0


def test_reserve_request_takes_its_own_maximum_length_at_admission():
    engine = _engine()
    engine.reset(dataclasses.replace(engine.config, kv_allocation="reserve_request"))
    stats = _first_step(engine)
    # Prompts of 5, 12 and 20 tokens with max_tokens 3 reserve 8, 15 and 23 slots: 1 + 2 + 3
    # pages, held whole from admission; paged would hold the same pages here only because
    # every reservation ends in the page its prompt already reaches.
    assert stats.num_running == 3
    assert stats.num_used_pages == 6
    long = SamplingParams(max_tokens=40, ignore_eos=True)
    engine.add_request(PROMPTS[0], long)
    engine.step()
    # 5 + 40 = 45 slots: 6 pages at admission, though only its 5 prompt tokens are computed.
    assert engine.stats().num_used_pages == 6 + 6
    while engine.has_unfinished:
        engine.step()
    assert engine.stats().num_used_pages == 0


@pytest.mark.slow
def test_reserve_max_rejects_what_the_pool_cannot_reserve():
    engine = tiny_engine(prefix_caching="off", num_pages=10, kv_allocation="reserve_max")
    request_id = engine.add_request(PROMPTS[0], SAMPLING)
    engine.step()
    assert "KV pages at full length" in engine.output(request_id).rejected_reason
    with pytest.raises(ValueError, match="kv_allocation"):
        EngineConfig(kv_allocation="contiguous")
