"""The app's own defences, in process: /health/ready runs one golden check at a time at the
lowest tier and under a timeout, /health notices a stalled loop within seconds, /metrics
can be put behind a key and counts engine restarts, and a client gone mid-upload is no
server error."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import pytest
from hardening_helpers import in_process_server

from claimbench.serving.api.app import STALL_S, create_app
from claimbench.serving.api.limits import BODY_TIMEOUT_S
from claimbench.serving.monitoring.health import HEALTH_PRIORITY, HEALTH_TENANT, Readiness
from claimbench.serving.tenants import hash_key


@pytest.fixture(scope="module")
def server():
    return in_process_server()


def test_ready_loops_share_one_golden_check_run_at_the_lowest_tier(server):
    state = server.state
    state.readiness.forget()
    before = state.readiness.num_checks

    async def loops() -> list[int]:
        async with server.client(None) as client:
            answers = await asyncio.gather(*(client.get("/health/ready") for _ in range(32)))
            return [a.status_code for a in answers]

    assert server.run(loops()) == [200] * 32
    # 32 callers at once, and again right after: one check (it once ran one per call).
    assert server.run(loops()) == [200] * 32
    assert state.readiness.num_checks == before + 1
    probe = state.engine.diagnose("newest_request", HEALTH_TENANT).result(10)
    assert probe.priority == HEALTH_PRIORITY  # below every tenant's tier


@pytest.mark.slow
def test_a_hung_engine_fails_readiness_within_its_timeout(server):
    state = server.state
    readiness = Readiness(cache_s=0.0, timeout_s=0.3)
    hang = state.engine.diagnose("stall", 1.5)  # the engine thread is stuck

    async def check():
        t0 = time.perf_counter()
        result = await readiness.check(state.engine, state.golden_prompt_ids, state.golden_tokens)
        return result, time.perf_counter() - t0

    result, took_s = server.run(check())
    hang.result(10)
    assert not result.ok and "did not finish within 0.3 s" in result.detail
    assert took_s < 1.2  # not the hang's 1.5 s (nor forever)


class StalledEngine:
    """An engine loop alive but not going round for longer than the stall limit."""

    is_alive = True

    def __init__(self, stalled_s: float) -> None:
        self.heartbeat = time.monotonic() - stalled_s


@pytest.mark.parametrize(("stalled_s", "status"), [(STALL_S + 1, 503), (0.0, 200)])
def test_health_notices_a_stalled_loop_within_seconds(server, stalled_s, status):
    assert STALL_S <= 10  # the engine beats every 0.5 s: a minute was far too long
    state = dataclasses.replace(server.state, engine=StalledEngine(stalled_s))
    app = create_app(state)

    async def get():
        import httpx

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get("/health")

    response = server.run(get())
    assert response.status_code == status


def test_metrics_behind_a_key_and_counting_restarts(server):
    state = server.state
    state.metrics_key_sha256 = hash_key("cb-metrics-key")
    try:

        async def get(headers):
            async with server.client(None) as client:
                return await client.get("/metrics", headers=headers)

        assert server.run(get({})).status_code == 401
        assert server.run(get({"Authorization": "Bearer cb-alice-key"})).status_code == 401
        allowed = server.run(get({"Authorization": "Bearer cb-metrics-key"}))
        assert allowed.status_code == 200
        assert "claimbench:engine_restarts_total 0" in allowed.text
    finally:
        state.metrics_key_sha256 = None
    assert server.run(get({})).status_code == 200  # open without a key (the default)


def upload(server, receive) -> list[dict]:
    """POST /v1/completions straight into the app with ``receive``; what it sent."""
    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/completions",
        "raw_path": b"/v1/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"authorization", b"Bearer cb-alice-key"),
            (b"content-length", b"1000"),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    server.run(server.app(scope, receive, send))
    return sent


def test_a_client_gone_mid_upload_is_no_server_error(server, caplog):
    messages = iter(
        [
            {"type": "http.request", "body": b'{"model": "claim', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )

    async def receive():
        return next(messages)

    with caplog.at_level(logging.ERROR, logger="claimbench.serving"):
        sent = upload(server, receive)
    assert sent[0]["status"] == 499  # it once logged a 500 and two tracebacks
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_body_trickled_in_gets_408_within_the_body_timeout(server):
    first = [{"type": "http.request", "body": b'{"model": "claim', "more_body": True}]

    async def receive():
        if first:
            return first.pop()
        await asyncio.sleep(3600)  # the rest never comes

    server.state.body_timeout_s = 0.2
    try:
        t0 = time.perf_counter()
        sent = upload(server, receive)
        took_s = time.perf_counter() - t0
    finally:
        server.state.body_timeout_s = BODY_TIMEOUT_S
    assert sent[0]["status"] == 408 and took_s < 2.0
