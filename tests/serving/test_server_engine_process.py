"""ProcessEngine without HTTP: the engine in a spawned process, driven from asyncio as the
server drives it: requests get their own tokens, admission answers at once, calls run in
the engine process, the stream interval groups tokens, a failed start is one clear error."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from server_helpers import TEST_ENGINE

from claimbench.engine.config_tenants import Tenant
from claimbench.engine.outputs import FinishEvent, RejectKind, TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.engine_loop.process_engine import EngineProcessError, ProcessEngine
from claimbench.serving.engine_loop.protocol import CoreOptions, EngineStopped, RequestRejected

PROMPTS = [[1, 5, 6, 7, 8, 9], [1, 10, 11, 12], [1, 13, 14, 15, 16, 17, 18, 19]]
GREEDY = SamplingParams(max_tokens=7, ignore_eos=True)
CONFIG = dataclasses.replace(
    TEST_ENGINE, tenants=(Tenant("limited", token_rate=1.0, token_burst=20.0),)
)


async def collect(stream) -> tuple[list[list], str]:
    """The request's events as handed over (one list per hand-over) and its finish reason."""
    batches = []
    while True:
        batch = await stream.next_batch()
        batches.append(batch)
        if isinstance(batch[-1], FinishEvent):
            return batches, batch[-1].reason


def tokens(batches: list[list]) -> list[int]:
    return [e.token_id for batch in batches for e in batch if isinstance(e, TokenEvent)]


def run(engine: ProcessEngine, scenario):
    async def main():
        engine.start()
        try:
            return await scenario()
        finally:
            await engine.shutdown()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def grouped_engine():
    """One engine process for the module, its tokens handed over in threes."""
    engine = ProcessEngine(CoreOptions(CONFIG, stream_interval=3))
    engine.launch()
    return engine


@pytest.mark.slow
def test_requests_get_their_tokens_grouped_and_admission_answers_at_once(grouped_engine):
    engine = grouped_engine

    async def scenario():
        alone = [
            tokens((await collect(await engine.add(p, GREEDY, tenant="t")))[0]) for p in PROMPTS
        ]
        streams = [await engine.add(p, GREEDY, tenant="t") for p in PROMPTS]
        together = await asyncio.gather(*(collect(s) for s in streams))
        with pytest.raises(ValueError, match="tenant"):
            await engine.add([1, 5], GREEDY, tenant="")
        with pytest.raises(RequestRejected) as never:
            await engine.add([5] * 125, GREEDY, tenant="t")
        await collect(await engine.add([1, 5, 6], GREEDY, tenant="limited"))  # 10 of 20
        with pytest.raises(RequestRejected) as limited:
            # 19 tokens > the 10 left: the bucket refills 1 token/s, so it stays short for 9 s.
            await engine.add([1, *range(5, 16)], GREEDY, tenant="limited")
        count = await engine.diagnostic("num_requests")
        return alone, together, never.value, limited.value, count

    alone, together, never, limited, count = run(engine, scenario)
    # f32: each prompt's greedy tokens are the same alone and sharing the batch.
    assert [tokens(batches) for batches, _ in together] == alone
    assert all(len(t) == 7 for t in alone) and all(r == "length" for _, r in together)
    for batches, _ in together:
        # The first token at once, then groups of three (indices 0 | 1-3 | 4-6 + finish).
        indices = [[e.index for e in b if isinstance(e, TokenEvent)] for b in batches]
        assert indices[0][0] == 0 and all(i[-1] % 3 == 0 for i in indices[:-1] if i)
        assert len(batches) <= 3
    assert never.kind == RejectKind.INVALID and "max_model_len" in never.reason
    assert limited.over_limit and "token_rate" in limited.reason
    assert limited.retry_after_s is not None and limited.retry_after_s > 0
    # The golden completion recorded at start, 6 + 3 requests here, none for the malformed.
    assert count == 1 + 2 * len(PROMPTS) + 3
    assert not engine.is_alive
    assert engine.exitcode == 0  # shut down, not killed


# Reads the state the first test leaves (the shared engine shut down): it runs with it.
@pytest.mark.slow
def test_after_shutdown_requests_are_refused(grouped_engine):
    async def scenario():
        with pytest.raises(EngineStopped):
            await grouped_engine.add([1, 5], GREEDY, tenant="t")

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_failing_start_is_one_clear_error():
    bad = dataclasses.replace(TEST_ENGINE, max_model_len=10**6)
    engine = ProcessEngine(CoreOptions(bad))
    with pytest.raises(EngineProcessError, match="max_model_len=1000000") as e:
        engine.launch()
    assert "\n" not in str(e.value) and not engine.is_alive


@pytest.mark.slow
def test_the_engine_process_reports_whether_its_steps_overlap(grouped_engine):
    """CPU's default is no overlap; asked for, the engine process overlaps its steps (and
    then waits for replacements while one runs: test_server_replacement_wait.py)."""
    assert grouped_engine.info.async_scheduling is False
    config = dataclasses.replace(TEST_ENGINE, async_scheduling=True)
    engine = ProcessEngine(CoreOptions(config, precompile=False))

    async def scenario():
        return tokens((await collect(await engine.add([1, 5, 6], GREEDY, tenant="t")))[0])

    assert engine.launch().async_scheduling is True
    assert len(run(engine, scenario)) == GREEDY.max_tokens
