"""uvicorn's httptools protocol with a bound on request headers: their size and their time.

uvicorn reads headers without a limit on either: headers of 64 MB were read whole, and a
client that sends a request line and never finishes its headers (slowloris) held its
connection open indefinitely, 60 of them at once. Here a request whose headers pass
``max_header_bytes`` gets 431 and its connection closes, and one whose headers are not
complete ``header_timeout_s`` after its first byte (or after the connection opened) gets
408 and its connection closes. The body is bounded elsewhere (limits.BodyLimit); idle
keep-alive connections by uvicorn's own ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from claimbench.serving.api.protocol import error_body

DEFAULT_MAX_HEADER_BYTES = 64 * 2**10  # nginx's large_client_header_buffers: 4 x 8 KiB; more
DEFAULT_HEADER_TIMEOUT_S = 10.0
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol refusing headers over ``max_header_bytes`` or ``header_timeout_s``
    (class attributes: ``limited_protocol`` makes a subclass with the values)."""

    max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    header_timeout_s = DEFAULT_HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = 0
        self._tail = b""  # the last bytes of the headers so far (a split blank line)
        self._in_headers = True  # a request's headers are awaited (none has begun yet)
        self._header_timer: asyncio.TimerHandle | None = None
        self._start_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            self._start_timer()
            # Only the bytes up to the blank line ending the headers count (a chunk may
            # carry body bytes after it); the blank line may straddle two chunks.
            seen = self._tail + data
            end = seen.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else max(end + 4 - len(self._tail), 0)
            self._tail = seen[-3:]
            if self._header_bytes > self.max_header_bytes:
                self._refuse(431, f"request headers over {self.max_header_bytes} bytes")
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
        self._tail = b""
        self._stop_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_headers = True  # the next request on this connection; its clock starts
        # with its first byte (meanwhile uvicorn's keep-alive timeout bounds an idle one)

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

    def _refuse(self, status: int, message: str) -> None:
        self._stop_timer()
        body = json.dumps(error_body(message, status)).encode()
        head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
        head += b"content-type: application/json\r\nconnection: close\r\n"
        head += b"content-length: %d\r\n\r\n" % len(body)
        self.transport.write(head + body)
        self.transport.close()
        self._in_headers = False


def limited_protocol(max_header_bytes: int, header_timeout_s: float) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn's ``http=`` with these limits; ValueError on bad ones."""
    if max_header_bytes < 1024:
        raise ValueError(f"max_header_bytes must be >= 1024, got {max_header_bytes}")
    if not header_timeout_s > 0:
        raise ValueError(f"header_timeout_s must be > 0, got {header_timeout_s}")
    return type(
        "LimitedHttpToolsProtocol",
        (LimitedHttpToolsProtocol,),
        {"max_header_bytes": max_header_bytes, "header_timeout_s": header_timeout_s},
    )
