"""A connection answered before its body has all arrived is ended: a keyless POST announcing a
megabyte got its 401 at once but stayed open while a byte came every few seconds, and so
did one whose body timed out (408). One client address holds a bounded number of
connections. Served by uvicorn with the server's protocol over the real app, small limits."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import pytest
import uvicorn
from hardening_helpers import KEYS, in_process_server
from server_helpers import free_port

from claimbench.serving.api import http_limits
from claimbench.serving.api.app import create_app
from claimbench.serving.api.http_limits import limited_protocol

BODY_TIMEOUT_S = 0.5
MAX_CONNECTIONS = 4
WAIT_S = 10.0  # generous: how long a socket waits for what must come (not a timing bound)


@pytest.fixture(scope="module")
def served():
    state = dataclasses.replace(in_process_server().state, body_timeout_s=BODY_TIMEOUT_S)
    protocol = limited_protocol(64 * 2**10, 30.0, MAX_CONNECTIONS)
    port = free_port()
    config = uvicorn.Config(
        create_app(state), port=port, http=protocol, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield port, protocol
    server.should_exit = True
    thread.join(10)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(WAIT_S)
    return sock


def read_response(sock: socket.socket) -> bytes:
    """One response: its head and its Content-Length bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def post_head(path: str, length: int, key: str | None = None) -> bytes:
    auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % path.encode()
    return head + auth + b"Content-Length: %d\r\n\r\n" % length


def wait_for_open(protocol, num_open: int) -> None:
    """Until the server holds at most ``num_open`` connections (or WAIT_S passed)."""
    deadline = time.monotonic() + WAIT_S
    while sum(protocol.connections_by_client.values()) > num_open:
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)


def test_a_keyless_post_gets_401_and_the_connection_ends(served, monkeypatch):
    port, protocol = served
    monkeypatch.setattr(http_limits, "LINGER_S", 0.5)
    with connect(port) as sock:
        sock.sendall(post_head("/v1/completions", 1_000_000) + b'{"model": ')
        response = read_response(sock)
        assert response.startswith(b"HTTP/1.1 401") and b"connection: close" in response.lower()
        assert sock.recv(1) == b""  # the server's FIN: no waiting for the announced megabyte
        # It discards what still comes for a moment, then closes its side entirely.
        wait_for_open(protocol, 0)
        assert protocol.connections_by_client == {}


def test_a_body_that_times_out_gets_408_and_the_connection_ends(served):
    port, protocol = served
    with connect(port) as sock:
        sock.sendall(post_head("/v1/completions", 1000, KEYS["alice"]) + b'{"model": ')
        response = read_response(sock)
        assert response.startswith(b"HTTP/1.1 408") and b"connection: close" in response.lower()
        assert sock.recv(1) == b""


def test_a_refusal_after_the_whole_body_keeps_the_connection(served):
    port, _ = served
    body = b'{"model": "x", "prompt": "a"}'
    with connect(port) as sock:
        for _ in range(2):  # both on one connection: a refusal alone does not end it
            sock.sendall(post_head("/v1/completions", len(body), KEYS["alice"]) + body)
            response = read_response(sock)
            assert response.startswith(b"HTTP/1.1 404")  # (a 401 always ends it)
            assert b"connection: close" not in response.lower()


def test_one_client_holds_a_bounded_number_of_connections(served):
    port, protocol = served
    wait_for_open(protocol, 0)
    held = [connect(port) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:  # each is served: the server has accepted them all
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")
        with connect(port) as extra:
            response = extra.recv(65536)
            assert response.startswith(b"HTTP/1.1 429")
            assert extra.recv(1) == b""
        held.pop().close()
        wait_for_open(protocol, MAX_CONNECTIONS - 1)
        with connect(port) as another:  # a freed place is taken again
            another.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(another).startswith(b"HTTP/1.1 200")
    finally:
        for sock in held:
            sock.close()
