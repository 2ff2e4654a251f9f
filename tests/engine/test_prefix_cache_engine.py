"""Prefix caching inside the engine: same greedy outputs, isolation per mode, safe page reuse."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import shared_tiny_engine, tiny_engine, tiny_model

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.metrics.serving_summary import summarize_by_tenant

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)
PAGE = 8  # tiny_engine's page size


def shared_prefix_prompts(num: int, prefix_len: int, seed: int) -> list[list[int]]:
    """num prompts: one of two prefixes, then a suffix of their own of 1..12 tokens."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(3, 97, size=prefix_len).tolist() for _ in range(2)]
    return [
        prefixes[i % 2] + rng.integers(3, 97, size=int(rng.integers(1, 13))).tolist()
        for i in range(num)
    ]


def check_no_shared_page_is_written(engine) -> None:
    """Wrap the scheduler: every token a step computes must land in a page only its request
    holds and the cache does not name."""
    schedule, pool = engine.scheduler.schedule, engine.block_manager.pool

    def checked(now):
        out = schedule(now)
        for request, n in out.scheduled:
            start = request.num_computed_tokens
            for page in {request.block_table[p // PAGE] for p in range(start, start + n)}:
                assert pool.ref_counts[page] == 1 and not pool.is_cached(page)
        return out

    engine.scheduler.schedule = checked


def serve_in_waves(engine, prompts, waves: int = 3) -> list[list[int]]:
    """Serve the prompts a wave at a time, so later waves can hit earlier waves' blocks."""
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    outputs = []
    for wave in np.array_split(np.arange(len(prompts)), waves):
        outputs += [o.token_ids for o in engine.generate([prompts[i] for i in wave], params)]
    return outputs


@pytest.mark.slow
def test_greedy_outputs_match_without_caching_through_evictions_and_preemption():
    prompts = shared_prefix_prompts(18, prefix_len=40, seed=0)
    expected = serve_in_waves(shared_tiny_engine(prefix_caching="off"), prompts)
    # 20 usable pages: the two prefixes (5 pages each) plus a few live requests, so cached
    # blocks are evicted and running requests preempted along the way.
    engine = tiny_engine(tiny_model(), num_pages=21, prefix_caching="shared")
    check_no_shared_page_is_written(engine)
    assert serve_in_waves(engine, prompts) == expected
    frame = engine.requests_frame()
    assert frame["prefix_hit_tokens"].max() == 40  # the whole prefix: 5 full pages
    assert (frame["prefix_hit_tokens"] % PAGE == 0).all()
    assert engine.block_manager.pool.num_evictions > 0
    assert frame["num_preemptions"].sum() > 0
    # Every reference was released: nothing is held, only cached blocks remain.
    assert engine.block_manager.num_used_pages == 0
    assert sum(engine.block_manager.pool.ref_counts) == 0
    assert engine.block_manager.chains == {} and engine.block_manager.tenant_pages == {}


def test_the_last_prompt_token_is_always_computed():
    engine = shared_tiny_engine(prefix_caching="shared")
    prompt = np.random.default_rng(1).integers(3, 97, size=3 * PAGE).tolist()
    first, second = engine.generate([prompt, prompt], GREEDY)  # one step: no hit yet
    assert second.token_ids == first.token_ids
    third = engine.generate([prompt], GREEDY)[0]
    assert third.token_ids == first.token_ids
    assert engine.requests_frame()["prefix_hit_tokens"].tolist() == [0, 0, 2 * PAGE]


@pytest.mark.parametrize(
    ("mode", "salts", "hit"),
    [
        ("per-tenant", (None, None), False),
        ("shared", (None, None), True),
        ("salted", ("s1", "s1"), True),
        ("salted", ("s1", "s2"), False),
        ("off", (None, None), False),
    ],
)
def test_who_shares_a_prefix_depends_on_the_mode(mode, salts, hit):
    engine = shared_tiny_engine(prefix_caching=mode)
    prompt = np.random.default_rng(2).integers(3, 97, size=4 * PAGE + 3).tolist()
    for tenant, salt in zip(("victim", "attacker"), salts, strict=True):
        engine.add_request(prompt, GREEDY, tenant=tenant, cache_salt=salt)
        while engine.has_unfinished:
            engine.step()
    hits = engine.requests_frame()["prefix_hit_tokens"].tolist()
    assert hits == [0, 4 * PAGE if hit else 0]
    # A tenant always shares with itself, unless caching is off.
    engine.add_request(prompt, GREEDY, tenant="attacker", cache_salt=salts[1])
    while engine.has_unfinished:
        engine.step()
    own_hit = engine.requests_frame()["prefix_hit_tokens"].tolist()[-1]
    assert own_hit == (0 if mode == "off" else 4 * PAGE)


def test_abort_releases_shared_references():
    engine = shared_tiny_engine(prefix_caching="per-tenant")
    prompt = np.random.default_rng(3).integers(3, 97, size=3 * PAGE + 1).tolist()
    engine.generate([prompt], GREEDY)
    long = SamplingParams(max_tokens=40, ignore_eos=True)
    ids = [engine.add_request(prompt, long) for _ in range(3)]
    engine.step()
    pool = engine.block_manager.pool
    shared = engine.requests[ids[0]].block_table[:3]
    assert [pool.ref_counts[p] for p in shared] == [3, 3, 3]
    engine.abort(ids[1])
    assert [pool.ref_counts[p] for p in shared] == [2, 2, 2]
    for i in (ids[0], ids[2]):
        engine.abort(i)
    assert sum(pool.ref_counts) == 0 and engine.block_manager.num_used_pages == 0
    assert pool.num_cached_blocks >= 3  # still cached for the next request


def test_hit_rate_per_tenant_in_metrics():
    engine = shared_tiny_engine(prefix_caching="per-tenant")
    prompt = np.random.default_rng(4).integers(3, 97, size=2 * PAGE + 4).tolist()
    for tenant in ("a", "a", "b"):
        engine.add_request(prompt, GREEDY, tenant=tenant)
        while engine.has_unfinished:
            engine.step()
    rates = summarize_by_tenant(engine.requests_frame())["prefix_hit_rate"]
    assert rates["a"] == pytest.approx(2 * PAGE / (2 * len(prompt)))
    assert rates["b"] == 0.0


def test_prompt_logprobs_requests_compute_their_whole_prompt():
    engine = shared_tiny_engine(prefix_caching="shared")
    prompt = np.random.default_rng(5).integers(3, 97, size=2 * PAGE + 5).tolist()
    engine.generate([prompt], GREEDY)
    params = SamplingParams(max_tokens=1, prompt_logprobs=True)
    out = engine.generate([prompt], params)[0]
    assert None not in out.prompt_logprobs and len(out.prompt_logprobs) == len(prompt) - 1
    assert engine.requests_frame()["prefix_hit_tokens"].tolist() == [0, 0]
