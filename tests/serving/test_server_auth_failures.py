"""A 401 ends its connection, and a client address that sends too many missing or wrong keys
gets 429 (with Retry-After) for every key it sends until its failures leave the window,
the right one included: a guesser can neither reuse a connection nor try keys at will."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
import uvicorn
from hardening_helpers import KEYS, MODEL, in_process_server
from server_helpers import free_port

from claimbench.serving.api.app import create_app
from claimbench.serving.api.auth_failures import MAX_FAILURES, FailedAuth
from claimbench.serving.api.http_limits import limited_protocol

WAIT_S = 10.0  # generous: how long a socket waits for what must come (not a timing bound)


def test_failures_past_the_limit_lock_the_client_out_until_they_leave_the_window():
    now = [100.0]
    failed = FailedAuth(max_failures=3, window_s=60.0, clock=lambda: now[0])
    for _ in range(3):
        assert failed.retry_after_s("10.0.0.1") is None
        failed.record("10.0.0.1")
        now[0] += 1.0
    assert failed.retry_after_s("10.0.0.1") == pytest.approx(57.0)  # the first leaves at 160
    assert failed.retry_after_s("10.0.0.2") is None  # another address is not affected
    now[0] = 160.0
    assert failed.retry_after_s("10.0.0.1") is None  # one of three left the window
    with pytest.raises(ValueError, match="got 0"):
        FailedAuth(max_failures=0)


def test_a_client_guessing_keys_gets_429_even_for_the_right_one():
    app = create_app(in_process_server().state)
    server = in_process_server()

    async def guesses() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            wrong = [
                await client.get("/v1/models", headers={"Authorization": f"Bearer guess-{i}"})
                for i in range(MAX_FAILURES)
            ]
            right = await client.get(
                "/v1/models", headers={"Authorization": f"Bearer {KEYS['alice']}"}
            )
            return [*wrong, right]

    answers = server.run(guesses())
    assert [a.status_code for a in answers[:-1]] == [401] * MAX_FAILURES
    assert all(a.headers["connection"] == "close" for a in answers[:-1])
    locked = answers[-1]
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1
    assert "failed API keys" in locked.json()["error"]["message"]


@pytest.fixture(scope="module")
def port():
    config = uvicorn.Config(
        create_app(in_process_server().state),
        port=free_port(),
        http=limited_protocol(64 * 2**10, 30.0),
        log_level="critical",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield config.port
    server.should_exit = True
    thread.join(10)


def test_a_401_whose_body_has_arrived_ends_the_connection(port):
    body = b'{"model": "%s", "prompt": "x"}' % MODEL.encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
    request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(WAIT_S)
        sock.sendall(request)  # the whole body: nothing left for the server to wait for
        data = b""
        while chunk := sock.recv(65536):  # to the server's close (a keep-alive would hang)
            data += chunk
    assert data.startswith(b"HTTP/1.1 401") and b"connection: close" in data.lower()
