"""The connection layer's own bounds, over raw sockets: the server as a whole holds a bounded
number of connections (503 past it, whatever the client address), a request a bounded number
of header lines (431) and a chunked body a bounded number of chunks (413), and bytes the HTTP
parser refuses get the OpenAI-shaped JSON 400, each with a close. Served by uvicorn with the
server's protocol over a tiny app that reads the body and counts what it saw."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import uvicorn
from server_helpers import free_port

from claimbench.serving.api.http_limits import limited_protocol

MAX_CONNECTIONS = 3
MAX_HEADER_LINES = 10
MAX_BODY_CHUNKS = 8
WAIT_S = 10.0  # generous: how long a socket waits for what must come (not a timing bound)

bodies_seen: list[bytes] = []


async def app(scope, receive, send):
    """Reads the whole body, records it, answers 200 with its length."""
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        more = message.get("more_body", False)
    bodies_seen.append(body)
    payload = b'{"length": %d}' % len(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


@pytest.fixture(scope="module")
def port():
    protocol = limited_protocol(
        64 * 2**10,
        30.0,
        max_connections_per_client=512,
        max_connections=MAX_CONNECTIONS,
        max_header_lines=MAX_HEADER_LINES,
        max_body_chunks=MAX_BODY_CHUNKS,
    )
    port = free_port()
    config = uvicorn.Config(app, port=port, http=protocol, log_level="critical", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield port
    server.should_exit = True
    thread.join(10)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(WAIT_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def exchange(port: int, raw: bytes) -> tuple[int, bytes, dict | None]:
    """Send ``raw`` on a fresh connection; the status, head and JSON body of the answer,
    read to the connection's end (so every refusal here must close it)."""
    with connect(port) as sock:
        sock.sendall(raw)
        data = read_until_closed(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, head.lower(), json.loads(body) if body else None


def get(path: bytes = b"/", extra: bytes = b"") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra + b"\r\n"


def test_the_server_holds_a_bounded_number_of_connections(port):
    held = [connect(port) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:  # each answered once: registered by the server, kept alive
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        with connect(port) as sock:  # refused as it opens: its answer comes unasked
            head, _, body = read_until_closed(sock).partition(b"\r\n\r\n")
        status, head, body = int(head.split(b" ")[1]), head.lower(), json.loads(body)
        assert status == 503 and b"content-type: application/json" in head
        assert body["error"]["code"] == 503 and "3 connections" in body["error"]["message"]
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:  # the server notices the closes
        status, _, _ = exchange(port, get())
        if status == 200:
            break
        time.sleep(0.05)
    assert status == 200


def test_header_lines_are_bounded(port):
    status, _, body = exchange(port, get(extra=b"a: b\r\n" * (MAX_HEADER_LINES - 2)))
    assert status == 200  # with Host and Connection: at the bound
    status, head, body = exchange(port, get(extra=b"a:\r\n" * (MAX_HEADER_LINES * 50)))
    assert status == 431 and b"connection: close" in head
    assert "header lines" in body["error"]["message"]


def chunked(num_chunks: int) -> bytes:
    head = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"1\r\nx\r\n" * num_chunks + b"0\r\n\r\n"


def test_a_chunked_body_has_a_bounded_number_of_chunks(port):
    bodies_seen.clear()
    status, _, body = exchange(port, chunked(MAX_BODY_CHUNKS - 1))  # plus the last, empty one
    assert status == 200 and body == {"length": MAX_BODY_CHUNKS - 1}
    status, head, body = exchange(port, chunked(100 * MAX_BODY_CHUNKS))
    assert status == 413 and b"connection: close" in head
    assert "chunks" in body["error"]["message"]
    assert bodies_seen == [b"x" * (MAX_BODY_CHUNKS - 1)]  # the long one never reached the app


MALFORMED = {
    "content-length abc": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    "content-length -1": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "two content-lengths": (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"
    ),
    "content-length and chunked": (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
    "unknown method": b"FOO / HTTP/1.1\r\nHost: x\r\n\r\n",
    "garbage": b"\x00\x01\x02 not http at all\r\n\r\n",
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_get_the_openai_shaped_400(port, raw):
    status, head, body = exchange(port, raw)
    assert status == 400
    assert b"content-type: application/json" in head and b"connection: close" in head
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["code"] == 400
