"""The engine process boundary: messages arrive whole however the pipe splits them, a dead
engine process fails health and requests at once (never a hang), and no process is left
behind when the server stops."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import threading
from multiprocessing.connection import Pipe
from pathlib import Path

import httpx
import pytest
from server_helpers import MODEL, TEST_ENGINE, free_port, start_server, wait_for

from claimbench.engine.outputs import FinishEvent, RejectEvent, RejectKind, TokenEvent
from claimbench.lab.probes.processes import children
from claimbench.models.checkpoint import default_model_path
from claimbench.serving.engine_loop.process_engine import FrameReader
from claimbench.serving.engine_loop.protocol import decode_event, encode_event
from claimbench.serving.server import ServeOptions


def child_states(pid: int) -> dict[int, str]:
    """Each live child of ``pid`` and its state letter (Z: a zombie nobody reaped)."""
    states = {}
    for child in children(pid):
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
        except FileNotFoundError:
            continue
        states[child] = stat.rsplit(")", 1)[1].split()[0]
    return states


def test_frames_split_anywhere_come_out_whole():
    reader_end, writer_end = Pipe(duplex=False)
    messages = [b"a", b"", b"x" * 70_000, pickle.dumps(("step", [1, 2, 3]))]
    for message in messages:
        # The big one is larger than a pipe's buffer: drain while it is written.
        threading.Thread(target=writer_end.send_bytes, args=(message,)).start()
        data = b""
        while len(data) < 4 + len(message):
            data += os.read(reader_end.fileno(), 4 + len(message) - len(data))
        frames = FrameReader()
        got = []
        for i in range(0, len(data), 3):  # three bytes at a time: headers split too
            frames._buffer += data[i : i + 3]
            got += frames.split()
        assert got == [message]
    writer_end.close()
    os.set_blocking(reader_end.fileno(), False)
    assert FrameReader().read(reader_end.fileno()) == ([], True)  # the writer is gone


@pytest.mark.slow
def test_step_events_cross_the_pipe_as_tuples_and_come_back_equal():
    events = [
        TokenEvent("req-3", 17, 0, 1.5, None),
        TokenEvent("req-4", 18, 5, 1.5, -0.25),
        FinishEvent("req-3", "length", 1.75),
        RejectEvent("req-5", "over its bucket", 2.0, RejectKind.OVER_LIMIT, 3.5),
        RejectEvent("req-6", "too long", 2.0),
    ]
    sent = pickle.dumps([encode_event(e) for e in events])
    assert all(type(fields) is tuple for fields in pickle.loads(sent))
    assert [decode_event(fields) for fields in pickle.loads(sent)] == events


@pytest.fixture
def own_server(tmp_path):
    """A server of this test's own (the test kills its engine process)."""
    options = ServeOptions(
        model_dir=default_model_path(),
        engine=dataclasses.replace(TEST_ENGINE, max_num_seqs=4),
        model_name=MODEL,
        port=free_port(),
        log_level="warning",
        shutdown_timeout_s=5,
        max_engine_restarts=0,  # the test sees the dead engine (restarts: hardening_restart)
    )
    running = start_server(options, {})
    yield running
    running.stop()


@pytest.mark.slow
def test_a_dead_engine_process_fails_health_and_requests_without_hanging(own_server):
    engine = own_server.state.engine
    engine_pid = engine.pid
    assert child_states(os.getpid()).get(engine_pid) not in (None, "Z")
    body = {"model": MODEL, "prompt": "def f():\n", "max_tokens": 100, "ignore_eos": True}
    url = f"{own_server.url}/v1/completions"
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", url, json={**body, "stream": True}) as response,
    ):
        lines = (line for line in response.iter_lines() if line)
        first = json.loads(next(lines)[6:])
        assert first["choices"][0]["text"] is not None  # generating
        engine.kill()  # what a crash of the engine process looks like
        rest = list(lines)  # must end, not hang: the read timeout is 30 s
    assert rest[-1] == "data: [DONE]"
    errors = [json.loads(line[6:]) for line in rest if '"error"' in line]
    assert errors and errors[0]["error"]["code"] == 503
    assert not any('"finish_reason":"length"' in line for line in rest)
    with httpx.Client(base_url=own_server.url, timeout=30) as http:
        health = http.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "dead"
        late = http.post("/v1/completions", json=body)
        assert late.status_code == 503
        assert "engine" in late.json()["error"]["message"]
        assert http.get("/metrics").status_code == 503
        assert http.get("/health/ready").status_code == 503
    # A crash, so `serve` will exit non-zero (the pipe may close before the exit code is in).
    assert "exit code -9" in str(engine.error)
    own_server.stop()
    # Reaped: neither the engine process nor a zombie of it is left.
    assert wait_for(lambda: engine_pid not in child_states(os.getpid()), timeout_s=10)
    assert "Z" not in child_states(os.getpid()).values()


@pytest.mark.slow
def test_stopping_the_server_ends_the_engine_process(own_server):
    engine_pid = own_server.state.engine.pid
    with httpx.Client(base_url=own_server.url, timeout=30) as http:
        body = {"model": MODEL, "prompt": "x = ", "max_tokens": 3}
        assert http.post("/v1/completions", json=body).status_code == 200
    own_server.stop()
    assert not own_server.state.engine.is_alive
    assert own_server.state.engine.error is None  # ended by the server: no crash to report
    assert engine_pid not in child_states(os.getpid())
    assert "Z" not in child_states(os.getpid()).values()
