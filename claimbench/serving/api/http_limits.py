"""uvicorn's httptools protocol with a bound on request headers: their size and their time.

uvicorn reads headers without a limit on either: headers of 64 MB were read whole, and a
client that sends a request line and never finishes its headers (slowloris) held its
connection open indefinitely, 60 of them at once. Here a request whose headers pass
``max_header_bytes`` gets 431 and its connection closes, and one whose headers are not
complete ``header_timeout_s`` after its first byte (or after the connection opened) gets
408 and its connection closes. The body is bounded elsewhere (limits.BodyLimit); idle
keep-alive connections by uvicorn's own ``timeout_keep_alive``.

A response sent before its request's body has all arrived (401 for a missing key, 413,
the 408 of a body that took too long) ends the connection: uvicorn otherwise kept it open
and discarded the rest of the body as it came, so a client sending a byte every few
seconds held it forever (1,000 keyless connections were all open after 90 s). The
response says ``connection: close``; then this side stops sending (a FIN, which the
client reads as the end) and discards what still comes for at most ``LINGER_S`` before it
closes: closing at once, with unread bytes, would reset the connection under a client
still sending, which then might never read its answer. And one client address may hold
at most ``max_connections_per_client`` connections: another gets 429 and is closed.

Past the per-client bound, 35 loopback addresses still held 17,500 connections (15,565 of
the process's 20,000 file descriptors), so the server as a whole holds at most
``max_connections`` (by default half the descriptor limit, at most 8,192): another gets 503
and is closed. A request has at most ``max_header_lines`` header lines (16,000 empty ones fit
64 KiB, and each cost a Python call: 0.19 s of event loop) and a chunked body at most
``max_body_chunks`` chunks (uvicorn concatenates the body chunk by chunk: a 4 MB body of
1-byte chunks took 0.25 s of event loop); past either, 431 or 413 and a close, counted
before the parser sees the bytes where it can be. A request the parser cannot read
(a bad Content-Length, two of them, Content-Length with chunked, an unknown method) gets
the OpenAI-shaped 400 every other error has, not uvicorn's plain text.
"""

from __future__ import annotations

import asyncio
import json
import resource

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from claimbench.serving.api.protocol import error_body

DEFAULT_MAX_HEADER_BYTES = 64 * 2**10  # nginx's large_client_header_buffers: 4 x 8 KiB; more
DEFAULT_HEADER_TIMEOUT_S = 10.0
# Open-loop benchmarks send every request of a burst from one loopback address at once.
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 512
# Apache's LimitRequestFields; nginx reads at most 4 x 8 KiB of headers, about as many lines.
DEFAULT_MAX_HEADER_LINES = 100
# A 4 MiB body (the default max_request_bytes) in chunks of 1 KiB; clients send far larger.
DEFAULT_MAX_BODY_CHUNKS = 4096
LINGER_S = 2.0  # after an early answer, the rest of the body is discarded this long at most
_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    413: b"Content Too Large",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def default_max_connections() -> int:
    """Half the process's file-descriptor limit, at most 8,192 (the engine's pipes, the
    model's files and the tokenizer's need the rest)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 8192
    return max(16, min(8192, soft // 2))


class _BodyChunksOver(Exception):
    """Raised from the parser's chunk callback: it stops parsing the bytes at hand."""


class _CloseAfterResponse:
    """The transport as a request's response cycle sees it: its ``close()`` (uvicorn's, once
    a response that is not kept alive is sent) lingers while the body is still coming."""

    def __init__(self, transport: asyncio.Transport, protocol: LimitedHttpToolsProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        self._protocol.close_after_response()

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol refusing headers over ``max_header_bytes`` or ``header_timeout_s``
    (class attributes: ``limited_protocol`` makes a subclass with the values)."""

    max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    header_timeout_s = DEFAULT_HEADER_TIMEOUT_S
    max_connections_per_client = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    max_connections = 8192  # limited_protocol sets default_max_connections()
    max_header_lines = DEFAULT_MAX_HEADER_LINES
    max_body_chunks = DEFAULT_MAX_BODY_CHUNKS
    # Open connections per client address; one dict per server (``limited_protocol``).
    connections_by_client: dict[str, int] = {}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = 0
        self._tail = b""  # the last bytes of the headers so far (a split blank line)
        self._in_headers = True  # a request's headers are awaited (none has begun yet)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_done = True  # every byte of the current request's body has arrived
        self._keep_alive = True  # what the current request asked for
        self._header_lines = 0
        self._num_chunks = 0
        self._refusal: tuple[int, str] | None = None  # what a stopped parse answers
        self._refused = False  # answered by _refuse: the connection is ending
        self._address = self.client[0] if self.client else None
        if len(self.connections) > self.max_connections:  # this one is in the set already
            self._address = None  # not counted for its client either
            limit = self.max_connections
            self._refuse(503, f"the server already holds {limit} connections", linger=False)
            return
        counts = self.connections_by_client
        if self._address is not None:
            counts[self._address] = counts.get(self._address, 0) + 1
            if counts[self._address] > self.max_connections_per_client:
                limit = self.max_connections_per_client
                self._refuse(429, f"this client already holds {limit} connections", linger=False)
                return
        self._start_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        counts = self.connections_by_client
        if self._address is not None:
            counts[self._address] -= 1
            if not counts[self._address]:
                del counts[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_headers:
            self._start_timer()
            # Only the bytes up to the blank line ending the headers count (a chunk may
            # carry body bytes after it); the blank line may straddle two chunks.
            seen = self._tail + data
            end = seen.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else max(end + 4 - len(self._tail), 0)
            header_part = data if end < 0 else data[: max(end + 4 - len(self._tail), 0)]
            self._header_lines += header_part.count(b"\n")
            self._tail = seen[-3:]
            if self._header_bytes > self.max_header_bytes:
                self._refuse(431, f"request headers over {self.max_header_bytes} bytes")
                return
            # The request line and the blank line end in a newline too.
            if self._header_lines > self.max_header_lines + 2:
                self._refuse(431, f"over {self.max_header_lines} request header lines")
                return
        super().data_received(data)

    def on_chunk_header(self) -> None:
        """A chunk of a chunked body begins (the parser's callback)."""
        self._num_chunks += 1
        if self._num_chunks > self.max_body_chunks:
            self._refusal = (413, f"a chunked request body has over {self.max_body_chunks} chunks")
            raise _BodyChunksOver

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser refused: the OpenAI-shaped error (or the
        refusal that stopped the parse), and a close."""
        status, message = self._refusal or (400, f"malformed HTTP request: {msg}")
        if self.cycle is not None and not self.cycle.response_complete:
            # The app may still be reading this request: it sees the client gone.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
            if self.cycle.response_started:
                self.transport.close()
                return
        self._refuse(status, message)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
        self._header_lines = 0
        self._num_chunks = 0
        self._tail = b""
        self._stop_timer()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope:
            return  # an upgrade: no request cycle of this protocol's
        headers = dict(self.headers)
        length = headers.get(b"content-length", b"0").strip()
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        self._body_done = not chunked and length in (b"", b"0")
        self._keep_alive = cycle.keep_alive
        if not self._body_done:
            # Answered before the body is all in, the connection ends; restored once it is.
            cycle.keep_alive = False
            cycle.transport = _CloseAfterResponse(self.transport, self)

    def on_message_complete(self) -> None:
        self._body_done = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = self._keep_alive
        super().on_message_complete()
        self._in_headers = True  # the next request on this connection; its clock starts
        # with its first byte (meanwhile uvicorn's keep-alive timeout bounds an idle one)
        if self.cycle is not None and self.cycle.response_complete and not self._keep_alive:
            self.transport.close()  # the last of a body answered early: nothing unread now

    def close_after_response(self) -> None:
        """The response cycle closes the connection: at once when nothing more is coming,
        else (the body still arriving) by a FIN now and a close within LINGER_S."""
        transport = self.transport
        if self._body_done or transport.is_closing():
            transport.close()
            return
        self._keep_alive = False  # what still arrives ends in a close, not a next request
        if transport.can_write_eof():
            transport.write_eof()
        self.loop.call_later(LINGER_S, transport.close)

    def _start_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._timed_out)

    def _stop_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _timed_out(self) -> None:
        self._header_timer = None
        if self._in_headers and not self.transport.is_closing():
            self._refuse(408, f"request headers not complete within {self.header_timeout_s:g} s")

    def _refuse(self, status: int, message: str, linger: bool = True) -> None:
        self._stop_timer()
        body = json.dumps(error_body(message, status)).encode()
        head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
        head += b"content-type: application/json\r\nconnection: close\r\n"
        head += b"content-length: %d\r\n\r\n" % len(body)
        self._in_headers = False
        self._refused = True  # what still arrives is discarded, never parsed
        transport = self.transport
        transport.write(head + body)
        # As after an early answer: a FIN now and a close within LINGER_S, so a client still
        # sending reads its answer instead of a reset. Not for a connection refused as it
        # opens: lingering ones held descriptors past the cap under a connection storm
        # (12,500 connections in 7.5 s filled a limit of 4,096), so it closes at once.
        if linger and transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()


def limited_protocol(
    max_header_bytes: int,
    header_timeout_s: float,
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    max_connections: int | None = None,
    max_header_lines: int = DEFAULT_MAX_HEADER_LINES,
    max_body_chunks: int = DEFAULT_MAX_BODY_CHUNKS,
) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn's ``http=`` with these limits (``max_connections``
    None: default_max_connections()); ValueError on bad ones."""
    if max_connections is None:
        max_connections = default_max_connections()
    for name, value in (
        ("max_connections", max_connections),
        ("max_header_lines", max_header_lines),
        ("max_body_chunks", max_body_chunks),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if max_header_bytes < 1024:
        raise ValueError(f"max_header_bytes must be >= 1024, got {max_header_bytes}")
    if not header_timeout_s > 0:
        raise ValueError(f"header_timeout_s must be > 0, got {header_timeout_s}")
    if max_connections_per_client < 1:
        raise ValueError(
            f"max_connections_per_client must be >= 1, got {max_connections_per_client}"
        )
    limits = {
        "max_header_bytes": max_header_bytes,
        "header_timeout_s": header_timeout_s,
        "max_connections_per_client": max_connections_per_client,
        "connections_by_client": {},
        "max_connections": max_connections,
        "max_header_lines": max_header_lines,
        "max_body_chunks": max_body_chunks,
    }
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), limits)
