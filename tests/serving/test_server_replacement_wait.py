"""The engine process waits, while its dispatched step runs, for the requests that clients
send when theirs finish (engine_core.EngineCore._await_replacements): a closed loop through
the engine process then schedules as the same loop does in process, and the wait ends on
the replacements, on its deadline, or when the step in flight ends."""

from __future__ import annotations

import dataclasses
import pickle
import threading
import time
from multiprocessing import Pipe
from types import SimpleNamespace

import pytest
from server_helpers import TEST_ENGINE

from claimbench.engine.build import build_engine
from claimbench.engine.outputs import FinishEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.engine_loop import engine_core
from claimbench.serving.engine_loop.engine_core import EngineCore, PipeChannel
from claimbench.serving.engine_loop.protocol import (
    AddRequest,
    CoreOptions,
    Reply,
    StepEvents,
    StopRequest,
    decode_event,
)

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)
PROMPTS = [[1, *range(5 + i, 9 + 2 * i)] for i in range(12)]
CLIENTS = 4
REPLY_DELAY_S = 0.02  # a client's turnaround: far longer than the loop's own


class StubEngine:
    """What the wait touches of an engine: its in-flight flag, step records, add_request
    and rejection."""

    def __init__(self, in_flight: bool, device_s: float) -> None:
        self.in_flight = in_flight
        self.step_records = [SimpleNamespace(device_s=device_s)]
        self.requests: dict[str, SimpleNamespace] = {}

    def step_in_flight(self) -> bool:
        return self.in_flight

    def add_request(self, prompt_ids, sampling, tenant, priority, cache_salt) -> str:
        request_id = f"r{len(self.requests)}"
        self.requests[request_id] = SimpleNamespace(rejection=None)
        return request_id

    def rejection(self, request_id: str) -> None:
        return self.requests[request_id].rejection


def stub_core(engine: StubEngine):
    inbox_r, inbox_w = Pipe(duplex=False)
    outbox_r, outbox_w = Pipe(duplex=False)
    core = EngineCore(engine, CoreOptions(TEST_ENGINE), PipeChannel(inbox_r, outbox_w))
    return core, inbox_w, outbox_r


def add(seq: int, prompt: list[int]) -> bytes:
    return pickle.dumps(AddRequest(seq, prompt, GREEDY, "t", 0, None))


def test_the_wait_takes_as_many_requests_as_finished_and_leaves_the_rest():
    engine = StubEngine(in_flight=True, device_s=60.0)  # a deadline far away
    core, to_core, _ = stub_core(engine)
    for seq in range(3):
        to_core.send_bytes(add(seq, [1, 5]))
    assert core._await_replacements(2)
    assert list(engine.requests) == ["r0", "r1"]  # the third waits for the loop
    assert core.channel.inbox.poll(0)


def test_no_wait_once_the_step_in_flight_has_ended():
    engine = StubEngine(in_flight=False, device_s=60.0)
    core, to_core, _ = stub_core(engine)
    to_core.send_bytes(add(0, [1, 5]))
    assert core._await_replacements(1)
    assert engine.requests == {}  # not read: the loop takes it before the next step


def test_the_wait_ends_at_its_deadline_when_nobody_replaces():
    engine = StubEngine(in_flight=True, device_s=0.01)  # the deadline: 5 ms away
    core, to_core, _ = stub_core(engine)
    assert core._await_replacements(4)  # returns without any request coming
    assert engine.requests == {}
    to_core.close()


@pytest.mark.slow
def test_the_wait_reports_the_server_gone():
    engine = StubEngine(in_flight=True, device_s=60.0)
    core, to_core, _ = stub_core(engine)
    to_core.close()
    assert not core._await_replacements(1)


def closed_loop_in_process(engine) -> int:
    """Steps a closed loop of CLIENTS over PROMPTS takes with the engine's own step()."""
    engine.trim_step_records(0)
    todo = list(PROMPTS)
    for _ in range(CLIENTS):
        engine.add_request(todo.pop(0), GREEDY, tenant="t")
    while engine.has_unfinished:
        for event in engine.step():
            if isinstance(event, FinishEvent) and todo:
                engine.add_request(todo.pop(0), GREEDY, tenant="t")
    return len(engine.step_records)


def closed_loop_through_core(engine, monkeypatch, share: float) -> int:
    """The same loop with the engine behind EngineCore's pipes and this thread the clients,
    each answering a finish with its next request REPLY_DELAY_S later (a remote client).
    Until every prompt is in the pipe the step in flight is taken as still running (``seq``,
    counted after each send: a flag on the prompts left would end a wait between taking the
    last prompt and sending it), so with a far deadline (a large ``share``) the wait ends on
    the replacements alone, and with share 0 there is no wait: no timing of this machine
    decides the schedule either way."""
    engine.trim_step_records(0)
    todo = list(PROMPTS)
    monkeypatch.setattr(engine_core, "REPLACEMENT_WAIT_SHARE", share)
    monkeypatch.setattr(engine, "step_in_flight", lambda: seq < len(PROMPTS))
    inbox_r, to_core = Pipe(duplex=False)
    from_core, outbox_w = Pipe(duplex=False)
    core = EngineCore(engine, CoreOptions(TEST_ENGINE), PipeChannel(inbox_r, outbox_w))
    seq = 0
    for _ in range(CLIENTS):  # all in the pipe before the loop's first step, as in process
        to_core.send_bytes(add(seq, todo.pop(0)))
        seq += 1
    thread = threading.Thread(target=core.run, daemon=True)
    thread.start()
    finished = 0
    while finished < len(PROMPTS):
        assert from_core.poll(60), "the engine loop went silent"
        message = pickle.loads(from_core.recv_bytes())
        if isinstance(message, Reply):
            assert message.ok, message.value
        if not isinstance(message, StepEvents):
            continue
        for event in map(decode_event, message.events):
            if isinstance(event, FinishEvent):
                finished += 1
                if todo:
                    time.sleep(REPLY_DELAY_S)
                    to_core.send_bytes(add(seq, todo.pop(0)))
                    seq += 1
    to_core.send_bytes(pickle.dumps(StopRequest()))
    thread.join(timeout=60)
    assert not thread.is_alive()
    return len(engine.step_records)


@pytest.mark.slow
def test_a_closed_loop_through_the_engine_process_schedules_as_in_process(monkeypatch):
    engine = build_engine(dataclasses.replace(TEST_ENGINE, async_scheduling=True))
    in_process = closed_loop_in_process(engine)
    assert closed_loop_in_process(engine) == in_process  # the schedule is deterministic
    assert closed_loop_through_core(engine, monkeypatch, share=1e6) == in_process
    # Without the wait the replacements reach the engine after the next step is built:
    # each starts a step later, and the same loop takes more steps.
    assert closed_loop_through_core(engine, monkeypatch, share=0.0) > in_process
