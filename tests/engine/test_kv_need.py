"""What admission accepts, allocation places: swept over pool sizes, request lengths around
every page boundary, allocation modes, tenant quotas and prefix hits."""

from __future__ import annotations

import itertools

import pytest
from engine_helpers import make_request, tiny_engine

from claimbench.engine.config import KV_ALLOCATIONS, EngineConfig
from claimbench.engine.config_tenants import Tenant
from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.request import Request, RequestStatus
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.sched.scheduler import Scheduler

PAGE_SIZE = 4


def _scheduler(mode: str, num_pages: int, max_model_len: int, quota: bool, prefix: str):
    usable = num_pages - 1
    # A quota below the pool: the tenant's cap, not the pool, bounds what it may hold.
    tenants = (Tenant("t", guaranteed_pages=1, burst_pages=usable - 2),) if quota else ()
    cfg = EngineConfig(
        max_num_seqs=4,
        max_num_batched_tokens=8,
        max_model_len=max_model_len,
        page_size=PAGE_SIZE,
        kv_allocation=mode,
        tenants=tenants,
        prefix_caching=prefix,
    )
    return Scheduler(cfg, BlockManager(num_pages, PAGE_SIZE, prefix))


def _serve(s: Scheduler, max_steps: int = 400) -> None:
    """Step as the engine does (one token sampled per caught-up request) until idle."""
    for _ in range(max_steps):
        if not s.has_unfinished:
            return
        for request, n in s.schedule(0.0).scheduled:
            request.num_computed_tokens += n
            if request.num_uncomputed_tokens == 0:
                request.append_output(5, 0.0, 0.0)
                if request.num_output_tokens >= request.sampling.max_tokens:
                    s.finish(request)
                    request.status = RequestStatus.FINISHED


def _submit(s: Scheduler, request: Request) -> bool:
    if s.admit(request) is not None:
        return False
    s.add(request)
    return True


def _cases():
    for num_pages in (4, 7):
        pool_tokens = (num_pages - 1) * PAGE_SIZE
        for max_model_len in (pool_tokens - PAGE_SIZE, pool_tokens - 1, pool_tokens + PAGE_SIZE):
            boundaries = range(PAGE_SIZE, pool_tokens + 2 * PAGE_SIZE, PAGE_SIZE)
            for boundary, delta in itertools.product(boundaries, (-1, 0, 1)):
                total = boundary + delta
                for max_tokens in sorted({1, 2, total - 1}):
                    if 1 <= max_tokens < total:
                        yield num_pages, max_model_len, total - max_tokens, max_tokens


@pytest.mark.parametrize("prefix", ["off", "shared"])
@pytest.mark.parametrize("quota", [False, True], ids=["pool", "quota"])
@pytest.mark.parametrize("mode", KV_ALLOCATIONS)
def test_every_accepted_request_is_placed_and_never_blocks_the_next(mode, quota, prefix):
    num_admitted = num_at_limit = 0
    for num_pages, max_model_len, num_prompt, max_tokens in _cases():
        s = _scheduler(mode, num_pages, max_model_len, quota, prefix)
        if prefix != "off":
            # The same prompt served first: the request starts from its cached blocks.
            warm = make_request(num_prompt, 1, tenant="t")
            if _submit(s, warm):
                _serve(s)
        request = make_request(num_prompt, max_tokens, tenant="t", ignore_eos=True)
        if not _submit(s, request):
            continue
        num_admitted += 1
        small = make_request(2, 1, tenant="t")  # 3 tokens, queued behind it
        small_admitted = _submit(s, small)
        _serve(s)
        case = (num_pages, max_model_len, num_prompt, max_tokens)
        assert request.status is RequestStatus.FINISHED, case
        assert request.num_output_tokens == max_tokens, case
        assert small.status is RequestStatus.FINISHED or not small_admitted, case
        slots = s.block_manager.num_pages_for(num_prompt + max_tokens - 1)
        limit = (
            s.quotas.max_pages("t") if s.quotas is not None else s.block_manager.num_usable_pages
        )
        num_at_limit += mode != "reserve_max" and slots == limit
    # The sweep reaches requests that need every page they may have (the edge that matters).
    assert num_admitted > 0
    assert num_at_limit > 0 or mode == "reserve_max"


def test_admission_counts_the_slots_the_reservation_takes():
    # 4 usable pages of 4 slots: 16 tokens + max_tokens 1 needs 16 slots (its last sampled
    # token is never written), 17 tokens + 1 needs 17 and is refused with the numbers.
    s = _scheduler("reserve_request", 5, 64, False, "off")
    assert s.admit(make_request(16, 1)) is None
    assert "needs 5 KV pages" in s.admit(make_request(17, 1))


def _prompt(num_tokens: int) -> list[int]:
    return [3 + i % 90 for i in range(num_tokens)]  # within the tiny model's 97 ids


@pytest.mark.slow
def test_reserve_request_one_past_a_page_boundary_is_served_with_the_request_behind():
    # 16 pages of 8 slots (15 usable): 110 + 11 tokens need 120 slots, exactly the pool.
    engine = tiny_engine(num_pages=16, kv_allocation="reserve_request", async_scheduling=False)
    big = engine.add_request(_prompt(110), SamplingParams(max_tokens=11, ignore_eos=True))
    small = engine.add_request([3, 4], SamplingParams(max_tokens=1, ignore_eos=True))
    assert engine.rejection(big) is None
    for _ in range(300):
        if not engine.has_unfinished:
            break
        engine.step()
    assert engine.output(big).finish_reason == "length"
    assert len(engine.output(big).token_ids) == 11
    assert engine.output(small).finish_reason == "length"


@pytest.mark.slow
def test_reserve_request_at_a_tenant_quota_is_served():
    # Guaranteed 1 + burst 9 pages: 68 + 13 tokens need 80 slots, exactly the quota's 10 pages.
    tenants = (Tenant("q", guaranteed_pages=1, burst_pages=9),)
    engine = tiny_engine(
        num_pages=16, kv_allocation="reserve_request", tenants=tenants, async_scheduling=False
    )
    sampling = SamplingParams(max_tokens=13, ignore_eos=True)
    big = engine.add_request(_prompt(68), sampling, tenant="q")
    small = engine.add_request([3, 4], SamplingParams(max_tokens=1), tenant="q")
    for _ in range(300):
        if not engine.has_unfinished:
            break
        engine.step()
    assert len(engine.output(big).token_ids) == 13
    assert engine.output(small).finish_reason in ("length", "stop")
