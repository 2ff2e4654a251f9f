"""A dead engine process is restarted (bounded tries, golden-checked, counted in /metrics),
the server gives up loudly when it cannot (`serve` exits 1, so a supervisor above sees the
crash), and at SIGTERM live streams are ended with an error event and [DONE] before the
grace period runs out instead of being cut mid-body."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from types import SimpleNamespace

import httpx
import pytest
import uvicorn
from server_helpers import MODEL, TEST_ENGINE, free_port, shared_server, start_server, wait_for
from typer.testing import CliRunner

from claimbench.cli.main import app as cli
from claimbench.models.checkpoint import default_model_path
from claimbench.serving import server as server_module
from claimbench.serving import supervisor as supervisor_module
from claimbench.serving.engine_loop.batch_policy import is_batch, set_batch_policy
from claimbench.serving.engine_loop.process_engine import EngineProcessError
from claimbench.serving.monitoring.health import Readiness
from claimbench.serving.server import GracefulServer, ServeOptions
from claimbench.serving.supervisor import EngineSupervisor


class DeadEngine:
    is_alive = False
    exitcode = -9
    error = EngineProcessError("the engine process ended with exit code -9")

    def __init__(self) -> None:
        self.shut_down = False

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        self.shut_down = True


def dead_state() -> SimpleNamespace:
    return SimpleNamespace(
        engine=DeadEngine(),
        draining=False,
        golden_tokens=[1, 2, 3],
        readiness=Readiness(),
        num_engine_restarts=0,
        engine_failure=None,
    )


def test_the_supervisor_gives_up_after_bounded_tries(monkeypatch):
    monkeypatch.setattr(supervisor_module, "CHECK_S", 0.01)
    tries = []

    def launch(options):
        tries.append(time.monotonic())
        raise EngineProcessError("the engine process ended during start-up (1)")

    state, gave_up = dead_state(), []
    supervisor = EngineSupervisor(None, max_restarts=3, backoff_s=0.02, launch=launch)
    asyncio.run(asyncio.wait_for(supervisor.watch(state, lambda: gave_up.append(1)), 10))
    assert len(tries) == 3 and gave_up == [1]
    assert state.engine.shut_down  # the dead one was reaped first
    assert "exit code -9" in state.engine_failure and "3 restarts failed" in state.engine_failure
    assert tries[2] - tries[1] >= 1.5 * (tries[1] - tries[0]) * 0.9  # backoff doubles


def test_a_restarted_engine_serving_a_different_golden_is_not_used(monkeypatch):
    monkeypatch.setattr(supervisor_module, "CHECK_S", 0.01)
    started = []

    class Imposter:
        info = SimpleNamespace(golden_tokens=[9, 9, 9])
        shut = False

        def start(self) -> None:
            started.append(self)

        async def shutdown(self, timeout_s: float = 30.0) -> None:
            Imposter.shut = True

    state, gave_up = dead_state(), []
    supervisor = EngineSupervisor(None, max_restarts=1, backoff_s=0.0, launch=lambda o: Imposter())
    asyncio.run(asyncio.wait_for(supervisor.watch(state, lambda: gave_up.append(1)), 10))
    assert gave_up == [1] and not started and Imposter.shut
    assert isinstance(state.engine, DeadEngine) and state.num_engine_restarts == 0


def test_serve_exits_1_when_the_engine_could_not_be_restarted(monkeypatch):
    state = SimpleNamespace(
        engine=SimpleNamespace(error=None), engine_failure=None, model_name=MODEL
    )

    class Server:
        def run(self) -> None:
            state.engine_failure = "the engine process ended (exit code -9) and 3 restarts failed"

    monkeypatch.setattr(server_module, "build_server_state", lambda options: (state, []))
    monkeypatch.setattr(server_module, "make_server", lambda s, options: Server())
    result = CliRunner().invoke(cli, ["serve", "--port", str(free_port())])
    assert result.exit_code == 1
    assert "3 restarts failed" in result.output


@pytest.mark.slow
def test_sigterm_ends_live_requests_just_before_the_grace_period_does():
    ended = []
    engine = SimpleNamespace(fail_all=lambda message: ended.append((time.monotonic(), message)))
    state = SimpleNamespace(engine=engine, draining=False)
    config = uvicorn.Config(lambda scope, receive, send: None, timeout_graceful_shutdown=1.0)
    server = GracefulServer(config, state)

    async def drain() -> float:
        server._loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        server.end_live_before_deadline()
        await asyncio.sleep(1.5)
        return t0

    t0 = asyncio.run(drain())
    assert len(ended) == 1 and ended[0][1] == "the server shut down"
    # Grace 1 s less its margin (half of it, under a second): before the grace ends.
    assert 0.45 <= ended[0][0] - t0 < 1.0


@pytest.mark.slow
def test_a_live_stream_ended_at_shutdown_gets_an_error_event_and_done():
    server = shared_server()
    request = {
        "model": MODEL,
        "prompt": "def g():\n",
        "max_tokens": 100,
        "ignore_eos": True,
        "stream": True,
    }
    with (
        server.http("alice") as http,
        http.stream("POST", "/v1/completions", json=request) as response,
    ):
        lines = (line for line in response.iter_lines() if line)
        assert json.loads(next(lines)[6:])["choices"]
        loop = server.server._loop  # the server's event loop owns the streams
        loop.call_soon_threadsafe(server.state.engine.fail_all, "the server shut down")
        rest = list(lines)
    assert rest[-1] == "data: [DONE]"
    error = json.loads(rest[-2][6:])["error"]
    assert error["code"] == 503 and error["message"] == "the server shut down"
    assert not any('"finish_reason":"length"' in line for line in rest)
    with server.http("alice") as http:  # the engine serves on (only the live were ended)
        assert http.post("/v1/completions", json={**request, "stream": False}).status_code == 200


@pytest.mark.slow  # starts its own engine process twice (no precompile: seconds each)
def test_a_killed_engine_process_is_restarted_and_serves_again():
    options = ServeOptions(
        model_dir=default_model_path(),
        engine=dataclasses.replace(TEST_ENGINE, max_num_seqs=4),
        model_name=MODEL,
        port=free_port(),
        log_level="warning",
        shutdown_timeout_s=5,
        precompile=False,
        api_batch_policy=True,  # as `serve` runs: the new engine must not inherit it
    )
    running = start_server(options, {})
    try:
        first = running.state.engine
        assert not is_batch(first.pid)
        first.kill()
        with httpx.Client(base_url=running.url, timeout=30) as http:
            assert wait_for(lambda: http.get("/health").status_code == 503, timeout_s=10)
            assert wait_for(lambda: http.get("/health").status_code == 200, timeout_s=240)
            assert running.state.engine is not first and running.state.engine.pid != first.pid
            assert http.get("/health/ready").status_code == 200
            body = {"model": MODEL, "prompt": "x = ", "max_tokens": 3}
            assert http.post("/v1/completions", json=body).status_code == 200
            assert "claimbench:engine_restarts_total 1" in http.get("/metrics").text
        assert not is_batch(running.state.engine.pid)  # the engine keeps the normal policy
    finally:
        running.stop()
        set_batch_policy(False)  # this test process's threads, as they were
