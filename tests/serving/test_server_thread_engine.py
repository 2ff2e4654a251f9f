"""ThreadEngine: the engine loop on a thread steps the engine; requests' events reach their
own streams on the event loop."""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import tiny_engine
from server_helpers import wait_for

from claimbench.engine.config_tenants import Tenant
from claimbench.engine.outputs import FinishEvent, RejectEvent, RejectKind, TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.engine_loop.engine_core import add_admitted
from claimbench.serving.engine_loop.protocol import CoreOptions, EngineStopped, RequestRejected
from claimbench.serving.engine_loop.request_stream import RequestStream
from claimbench.serving.engine_loop.thread_engine import ThreadEngine

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19]]
GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)
LONG = SamplingParams(max_tokens=100, ignore_eos=True)


@pytest.fixture
def engine():
    return tiny_engine(tenants=(Tenant("limited", token_rate=1.0, token_burst=20.0),))


def thread_engine(engine, **options) -> ThreadEngine:
    """A loop over ``engine`` (no tokenizer, so no golden completion: not launched); start
    it on the event loop."""
    return ThreadEngine(engine, CoreOptions(engine.config, precompile=False, **options))


async def collect(stream) -> tuple[list[int], str]:
    tokens = []
    while True:
        event = await stream.next()
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
        elif isinstance(event, FinishEvent):
            return tokens, event.reason


def test_concurrent_requests_get_their_own_tokens(engine):
    expected = [o.token_ids for o in engine.generate(PROMPTS, GREEDY)]
    loop_engine = thread_engine(engine)

    async def main():
        loop_engine.start()
        try:
            streams = [await loop_engine.add(p, GREEDY, tenant="t") for p in PROMPTS]
            return await asyncio.gather(*(collect(s) for s in streams))
        finally:
            await loop_engine.shutdown()

    results = asyncio.run(main())
    assert [tokens for tokens, _ in results] == expected  # f32: batch-invariant
    assert all(reason == "length" for _, reason in results)


def test_bad_input_and_rejections_raise_and_leave_nothing_queued(engine):
    loop_engine = thread_engine(engine)

    async def main():
        loop_engine.start()
        with pytest.raises(ValueError, match="tenant"):
            await loop_engine.add([5, 6], GREEDY, tenant="")
        with pytest.raises(RequestRejected) as never:
            await loop_engine.add([5] * 125, GREEDY, tenant="t")
        first = await loop_engine.add([5, 6, 7], GREEDY, tenant="limited")  # 9 of 20 tokens
        await collect(first)
        with pytest.raises(RequestRejected) as limited:
            await loop_engine.add([5, 6, 7, 8, 9, 10], GREEDY, tenant="limited")  # 12 > 11
        return never.value, limited.value

    never, limited = asyncio.run(main())
    # The two rejections' events are delivered by the loop's next step.
    assert wait_for(lambda: not loop_engine.diagnose("has_unfinished").result(10))
    num_requests = loop_engine.diagnose("num_requests").result(10)
    asyncio.run(loop_engine.shutdown())
    assert never.kind == RejectKind.INVALID and not never.over_limit
    assert "max_model_len" in never.reason
    assert limited.kind == RejectKind.OVER_LIMIT and limited.over_limit
    assert "token_rate" in limited.reason
    # The bucket refills 1 token/s and was 1 token short when the request was refused
    # (arrival times are the engine's clock, so the wait is read at the refusal, not later).
    assert 0 < limited.retry_after_s <= 1.0
    assert never.retry_after_s is None
    assert num_requests == 3  # the malformed one left no state


class RejectingEngine:
    """Only what ``add_admitted`` may touch: add_request and rejection (no scheduler)."""

    def __init__(self, rejection: RejectEvent | None) -> None:
        self._rejection = rejection
        self.added: list[tuple] = []

    def add_request(self, prompt, sampling, *, tenant, priority, cache_salt) -> str:
        self.added.append((list(prompt), tenant, priority, cache_salt))
        return "req-7"

    def rejection(self, request_id: str) -> RejectEvent | None:
        assert request_id == "req-7"
        return self._rejection


def test_add_admitted_raises_the_engines_rejection_with_its_retry_after():
    event = RejectEvent("req-7", "over its bucket", 1.0, RejectKind.OVER_LIMIT, 7.5)
    with pytest.raises(RequestRejected) as refused:
        add_admitted(
            RejectingEngine(event), [5, 6], GREEDY, tenant="a", priority=1, cache_salt=None
        )
    assert refused.value.reason == "over its bucket" and refused.value.over_limit
    assert refused.value.retry_after_s == 7.5
    admitted = RejectingEngine(None)
    request_id = add_admitted(admitted, (5, 6), GREEDY, tenant="a", priority=0, cache_salt="s")
    assert request_id == "req-7" and admitted.added == [([5, 6], "a", 0, "s")]


def test_a_long_running_loop_keeps_bounded_records(engine):
    loop_engine = thread_engine(engine, keep_finished_requests=2, keep_step_records=4)

    async def main():
        loop_engine.start()
        for prompt in PROMPTS * 3:
            await collect(await loop_engine.add(prompt, GREEDY, tenant="t"))

    asyncio.run(main())
    records = loop_engine.diagnose("step_numbers").result(10)
    num_service_rows = loop_engine.diagnose("num_step_rows").result(10)
    num_requests = loop_engine.diagnose("num_requests").result(10)
    asyncio.run(loop_engine.shutdown())
    # 9 requests of 6 tokens one after another: >= 54 steps, of which at most 7 are kept
    # (trimmed to 4 whenever 8 pile up), numbered as the engine counted them.
    assert 4 <= len(records) < 8 and records[-1] >= 53
    assert records == list(range(records[0], records[0] + len(records)))
    assert num_service_rows == len(records) and num_requests == 2  # the newest two


def test_abort_frees_pages_at_once(engine):
    loop_engine = thread_engine(engine)
    used_before = engine.stats().num_used_pages

    async def main():
        loop_engine.start()
        stream = await loop_engine.add([5, 6, 7], LONG, tenant="t")
        assert isinstance(await stream.next(), TokenEvent)
        used_running = (await loop_engine.diagnostic("stats")).num_used_pages
        loop_engine.abort(stream.request_id)
        used_after = (await loop_engine.diagnostic("stats")).num_used_pages
        await loop_engine.shutdown()
        return used_running, used_after

    used_running, used_after = asyncio.run(main())
    assert used_running > used_before and used_after == used_before


def test_stop_aborts_in_flight_and_refuses_later_calls(engine):
    loop_engine = thread_engine(engine)

    async def main():
        loop_engine.start()
        stream = await loop_engine.add([5, 6, 7], LONG, tenant="t")
        await stream.next()
        await loop_engine.shutdown()
        _, reason = await collect(stream)
        with pytest.raises(EngineStopped):
            await loop_engine.add([5, 6], GREEDY, tenant="t")
        return reason

    assert asyncio.run(main()) == "abort"
    assert not loop_engine.is_alive


def test_a_failing_step_wakes_every_waiter(engine):
    loop_engine = thread_engine(engine)

    def broken_step():
        raise RuntimeError("device lost")

    engine.step = broken_step  # the loop calls the instance's step

    async def main():
        loop_engine.start()
        stream = await loop_engine.add([5, 6, 7], GREEDY, tenant="t")
        with pytest.raises(EngineStopped):
            await asyncio.wait_for(stream.next(), 10)
        await loop_engine.shutdown()

    asyncio.run(main())
    assert isinstance(loop_engine.error, RuntimeError) and not loop_engine.is_alive


def test_stream_interval_hands_tokens_over_in_groups(engine):
    expected = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=7, ignore_eos=True))
    loop_engine = thread_engine(engine, stream_interval=3)

    async def main():
        loop_engine.start()
        stream = await loop_engine.add(
            PROMPTS[0], SamplingParams(max_tokens=7, ignore_eos=True), tenant="t"
        )
        batches = []
        while not batches or not isinstance(batches[-1][-1], FinishEvent):
            batches.append(await stream.next_batch())
        await loop_engine.shutdown()
        return batches

    batches = asyncio.run(main())
    tokens = [e.token_id for batch in batches for e in batch if isinstance(e, TokenEvent)]
    assert tokens == expected[0].token_ids
    # The first token at once, then groups of three: hand-overs after tokens 0 and 3 and
    # with the finish (a slow consumer may merge them, never split them).
    assert len(batches) <= 3
    for batch in batches[:-1]:
        assert isinstance(batch[-1], TokenEvent) and batch[-1].index % 3 == 0
    assert batches[0][0].index == 0


def test_a_stream_interval_below_one_is_refused(engine):
    with pytest.raises(ValueError, match="stream_interval must be >= 1"):
        CoreOptions(engine.config, stream_interval=0)


def test_a_stream_read_at_its_end_wakes_once_with_everything():
    async def run() -> tuple[list, bool]:
        stream = RequestStream("req-0")
        stream.wake_at_end()
        reader = asyncio.ensure_future(stream.next_batch())
        for index in range(3):
            stream.push([TokenEvent("req-0", 40 + index, index, 0.0, None)])
            await asyncio.sleep(0)
        woken_early = reader.done()
        stream.push([FinishEvent("req-0", "length", 0.0)])
        return await reader, woken_early

    batch, woken_early = asyncio.run(run())
    assert not woken_early
    assert [e.token_id for e in batch[:3]] == [40, 41, 42]
    assert isinstance(batch[3], FinishEvent) and len(batch) == 4


def test_a_stream_read_at_its_end_still_wakes_on_a_failure():
    async def run() -> None:
        stream = RequestStream("req-0")
        stream.wake_at_end()
        reader = asyncio.ensure_future(stream.next_batch())
        stream.push([TokenEvent("req-0", 40, 0, 0.0, None)])
        await asyncio.sleep(0)
        stream.push([EngineStopped("gone")])
        assert [e.token_id for e in await reader] == [40]  # what came before, first
        with pytest.raises(EngineStopped):
            await stream.next_batch()

    asyncio.run(run())
