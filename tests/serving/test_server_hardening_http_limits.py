"""Request headers are bounded in size (431) and in time (408): uvicorn once read 64 MB of
headers whole, and a client that never finished its headers held its connection forever.
The protocol is served here by uvicorn over a trivial app, with small limits."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
import uvicorn
from server_helpers import free_port

from claimbench.serving.api.http_limits import limited_protocol

MAX_HEADER_BYTES = 4096
HEADER_TIMEOUT_S = 0.5


async def hello(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"got %d" % len(body)})


@pytest.fixture(scope="module")
def port():
    port = free_port()
    config = uvicorn.Config(
        hello,
        port=port,
        http=limited_protocol(MAX_HEADER_BYTES, HEADER_TIMEOUT_S),
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield port
    server.should_exit = True
    thread.join(10)


def exchange(port: int, data: bytes, wait_s: float = 5.0) -> tuple[bytes, float]:
    """Send ``data``, read until the server closes; (what came back, seconds to close)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(wait_s)
        t0 = time.perf_counter()
        with contextlib.suppress(OSError):  # the server may close before all is sent
            sock.sendall(data)
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return reply, time.perf_counter() - t0


def test_a_normal_request_with_its_body_in_one_packet_passes(port):
    body = b"z" * 20_000  # more than the header limit, but body, not headers
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    reply, _ = exchange(port, request % len(body) + body)
    assert reply.startswith(b"HTTP/1.1 200") and b"got 20000" in reply


def test_headers_over_the_limit_get_431(port):
    big = b"X-Big: " + b"a" * (MAX_HEADER_BYTES * 4) + b"\r\n"
    reply, _ = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
    assert reply.startswith(b"HTTP/1.1 431")
    assert b"request headers over 4096 bytes" in reply


def test_headers_never_finished_get_408_and_the_connection_closes(port):
    reply, closed_s = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert reply.startswith(b"HTTP/1.1 408")
    assert HEADER_TIMEOUT_S * 0.8 <= closed_s < HEADER_TIMEOUT_S + 2.0


def test_a_connection_that_sends_nothing_is_closed_too(port):
    reply, closed_s = exchange(port, b"")
    assert reply.startswith(b"HTTP/1.1 408") and closed_s < HEADER_TIMEOUT_S + 2.0


def test_limits_below_sense_are_refused():
    with pytest.raises(ValueError, match="max_header_bytes"):
        limited_protocol(10, 1.0)
    with pytest.raises(ValueError, match="header_timeout_s"):
        limited_protocol(4096, 0)
