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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

RAW_SEND = "claimbench.raw_send"  # the scope key of the server's send

Write = Callable[[str, bool], Awaitable[None]]  # (events, last): one body message


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
        ended = False

        async def write(events: str, last: bool) -> None:
            nonlocal ended
            ended = ended or last
            await raw(
                {"type": "http.response.body", "body": events.encode(), "more_body": not last}
            )

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
        if not ended:
            await raw({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
