"""The streamed completion's HTTP response: raw ASGI, one socket write per wake-up.

Starlette's StreamingResponse sends every item of its iterator through each middleware's
send wrapper (error handling, exception handling, the route's own), a coroutine layer
apiece, and anyio's task group watches for the disconnect. At 16 streams every engine
step writes 16 chunks, so here the response's start goes through those layers once (they
record that a response started) and the body goes straight to the server's own ``send``,
which the app keeps in the request's scope (``RawSendApp``). The writer hands over
whatever the request's wake-up produced as one string: every chunk of it stays its own
``data:`` event, and they share one ``http.response.body`` (one socket write). A client
that goes away cancels the writer, whose request is then aborted (``generation.pieces``).

``BodyWriter.write_now`` goes one step further for the chunks in the middle of a stream: it
writes a chunk from a plain callback (the engine's events as they are read off its pipe,
``RequestStream.listener``) straight onto the connection's transport, framed as uvicorn's
httptools protocol frames a chunked body (``%x\r\n`` size, data, ``\r\n``), with no task
woken and no coroutine entered. It does so only when uvicorn would write the same bytes at
once: its httptools protocol, a started chunked response, the client still there, the
transport not paused for flow control, and no write of ours still awaiting uvicorn's send
(order is kept). Otherwise it declines and the chunk takes the awaited path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

RAW_SEND = "claimbench.raw_send"  # the scope key of the server's send

_HTTPTOOLS_CYCLE = "uvicorn.protocols.http.httptools_impl"  # the protocol write_now knows


class BodyWriter:
    """A streamed response's body writes: awaited through the server's ``send`` (``await
    writer(events, last)``: one body message), or at once onto the transport
    (``write_now``) where that writes what ``send`` would."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._awaiting = 0  # writes inside send (one may wait on flow control)
        self.ended = False  # the last write was made
        cycle = getattr(send, "__self__", None)  # uvicorn's RequestResponseCycle
        known = type(cycle).__module__ == _HTTPTOOLS_CYCLE and all(
            hasattr(cycle, name)
            for name in ("transport", "flow", "chunked_encoding", "disconnected")
        )
        self._cycle = cycle if known else None

    async def __call__(self, events: str, last: bool) -> None:
        self.ended = self.ended or last
        self._awaiting += 1
        try:
            body = events.encode()
            await self._send({"type": "http.response.body", "body": body, "more_body": not last})
        finally:
            self._awaiting -= 1

    def can_write_now(self) -> bool:
        """Whether ``write_now`` would write (checked before the chunk is made)."""
        cycle = self._cycle
        return (
            cycle is not None
            and not self._awaiting
            and not self.ended
            and cycle.chunked_encoding is True
            and not cycle.disconnected
            and not cycle.response_complete
            and not cycle.flow.write_paused
        )

    def write_now(self, events: str) -> bool:
        """Write ``events`` (not the last) as one chunk now; False, writing nothing, when
        ``can_write_now`` says no."""
        if not self.can_write_now():
            return False
        body = events.encode()
        self._cycle.transport.write(b"%x\r\n%s\r\n" % (len(body), body))
        return True


Write = BodyWriter


class RawSendApp(FastAPI):
    """FastAPI that keeps the server's ``send`` in each request's scope."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[RAW_SEND] = send
        await super().__call__(scope, receive, send)


class EventStream(Response):
    """``text/event-stream`` written by ``produce(write)``; its last write says so."""

    media_type = "text/event-stream"

    def __init__(self, produce: Callable[[Write], Awaitable[None]]) -> None:
        self.produce = produce
        self.status_code = 200
        self.background = None
        self.init_headers(None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        await send(start)
        raw = scope.get(RAW_SEND, send)
        write = BodyWriter(raw)
        body = asyncio.ensure_future(self.produce(write))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((body, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not body.done():
                body.cancel()
                await asyncio.wait((body,))
        if body.cancelled():
            return  # the client went away: nothing more can reach it
        body.result()  # a bug in the writer surfaces as the server's error
        if not write.ended:
            await raw({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
