"""The streamed response's raw ASGI writing, and the server's choice of event loop."""

from __future__ import annotations

import asyncio
import sys

import pytest

from claimbench.serving.api.event_stream import RAW_SEND, EventStream, RawSendApp
from claimbench.serving.server import event_loop


class Recorder:
    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def __call__(self, message: dict) -> None:
        self.messages.append(message)


def never_disconnects():
    async def receive() -> dict:
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    return receive


def test_start_goes_through_the_layers_and_the_body_straight_to_the_server():
    layered, raw = Recorder(), Recorder()

    async def produce(write) -> None:
        await write("data: 1\n\ndata: 2\n\n", False)  # two chunks of one wake-up, one write
        await write("data: [DONE]\n\n", True)

    response = EventStream(produce)
    asyncio.run(response({"type": "http", RAW_SEND: raw}, never_disconnects(), layered))
    assert [m["type"] for m in layered.messages] == ["http.response.start"]
    assert (b"content-type", b"text/event-stream; charset=utf-8") in layered.messages[0]["headers"]
    bodies = [(m["body"], m["more_body"]) for m in raw.messages]
    assert bodies == [(b"data: 1\n\ndata: 2\n\n", True), (b"data: [DONE]\n\n", False)]


def test_without_a_raw_send_the_body_takes_the_given_send_and_is_ended():
    send = Recorder()

    async def produce(write) -> None:
        await write("data: x\n\n", False)

    asyncio.run(EventStream(produce)({"type": "http"}, never_disconnects(), send))
    assert [m["type"] for m in send.messages] == ["http.response.start"] + [
        "http.response.body"
    ] * 2
    assert send.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_a_disconnect_cancels_the_writer():
    raw, seen = Recorder(), []

    async def produce(write) -> None:
        await write("data: 1\n\n", False)
        try:
            await asyncio.Event().wait()  # the next token never comes
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def receive() -> dict:
        await asyncio.sleep(0)
        return {"type": "http.disconnect"}

    asyncio.run(EventStream(produce)({"type": "http", RAW_SEND: raw}, receive, Recorder()))
    assert seen == ["cancelled"]
    assert [m["more_body"] for m in raw.messages] == [True]


def test_the_app_keeps_the_servers_send_in_the_scope():
    send, scope = Recorder(), {"type": "http", "method": "GET", "path": "/none", "headers": []}
    scope.update(query_string=b"", root_path="", server=None, client=None, scheme="http")

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(RawSendApp()(scope, receive, send))
    assert scope[RAW_SEND] is send
    assert send.messages[0]["status"] == 404  # the app answered through that send


def test_event_loop_falls_back_to_asyncio_without_uvloop(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert event_loop() == "asyncio"


def test_event_loop_is_uvloop_where_installed():
    pytest.importorskip("uvloop")
    assert event_loop() == "uvloop"
