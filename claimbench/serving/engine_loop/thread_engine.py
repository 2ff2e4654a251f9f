"""ThreadEngine: the engine loop on a thread of this process, over an engine the caller holds.

For a caller that reads its engine's records afterwards (an experiment served over HTTP,
lab/load/http_serving.py). The loop and the messages are those of `claimbench serve`'s engine
process (engine_core.py, protocol.py): only the transport differs. Messages to the loop
go through a queue, unpickled; what comes back is handled on the loop's thread as it is
sent: replies resolve their futures at once (a caller may block on one with no event loop
running: a harness between runs, a test), and a step's events reach each request's stream
with one ``loop.call_soon_threadsafe`` per event loop that added requests (not one per
token: at 16 streams that would be 16 wake-ups of the server's loop per step).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable

from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import Event
from claimbench.serving.engine_loop.engine_client import EngineClient
from claimbench.serving.engine_loop.engine_core import EngineCore, prepare
from claimbench.serving.engine_loop.protocol import (
    CoreInfo,
    CoreOptions,
    FromEngine,
    StopRequest,
    ToEngine,
)
from claimbench.serving.engine_loop.request_stream import RequestStream


class QueueChannel:
    """The loop's side: messages in from a queue, out to ``deliver`` (on the loop's thread)."""

    def __init__(self, deliver: Callable[[FromEngine], None]) -> None:
        self.inbox: queue.SimpleQueue[ToEngine] = queue.SimpleQueue()
        self._deliver = deliver
        self._waiting: ToEngine | None = None  # taken off the queue by readable()

    def readable(self, timeout_s: float) -> bool:
        if self._waiting is None:
            try:
                if timeout_s > 0:
                    self._waiting = self.inbox.get(timeout=timeout_s)
                else:
                    self._waiting = self.inbox.get_nowait()
            except queue.Empty:
                return False
        return True

    def receive(self) -> ToEngine | None:
        message, self._waiting = self._waiting, None
        return message if message is not None else self.inbox.get()

    def send(self, message: FromEngine) -> None:
        self._deliver(message)


class ThreadEngine(EngineClient):
    """Runs ``engine`` on its own thread; ``launch()`` before serving (it records the golden
    completion), ``start()`` to run the loop, ``shutdown()`` to end it. A request's events
    go to the event loop that added it."""

    def __init__(self, engine: LLMEngine, options: CoreOptions) -> None:
        super().__init__(options)
        self._engine = engine
        self._channel: QueueChannel | None = None
        # Each stream's event loop (the one its request was added on).
        self._loops: weakref.WeakKeyDictionary[RequestStream, asyncio.AbstractEventLoop] = (
            weakref.WeakKeyDictionary()
        )
        self._thread = threading.Thread(target=self._run, name="claimbench-engine", daemon=True)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and not self._closed and self.error is None

    @property
    def _started(self) -> bool:
        return self._channel is not None and self._thread.is_alive()

    def launch(self) -> CoreInfo:
        """Compile (when the options say so) and record the golden completion, on the
        caller's thread, before the loop starts."""
        self.info = prepare(self._engine, self.options.precompile)
        return self.info

    def start(self) -> None:
        """Start the loop."""
        self._channel = QueueChannel(self._handle)
        self.heartbeat = time.monotonic()
        self._thread.start()

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        """Abort whatever is still in flight (its events still come) and end the loop."""
        if self._channel is None:
            return
        self._send_quietly(StopRequest())
        deadline = time.monotonic() + timeout_s
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # the loop's last messages, handed over, are handled first

    def _send(self, message: ToEngine) -> None:
        self._channel.inbox.put(message)

    def _new_stream(self) -> RequestStream:
        stream = RequestStream()
        self._loops[stream] = asyncio.get_running_loop()
        return stream

    def _push(self, batch: list[tuple[RequestStream, list[Event | Exception]]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for stream, events in batch:
            by_loop[self._loops[stream]].append((stream, events))
        for loop, mine in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening
                loop.call_soon_threadsafe(_push_all, mine)

    def _run(self) -> None:
        try:
            EngineCore(self._engine, self.options, self._channel).run()
        except Exception as e:  # a bug or a device failure (logged by the loop)
            self.error = e
        finally:
            self._fail_waiters()


def _push_all(batch: list[tuple[RequestStream, list[Event | Exception]]]) -> None:
    for stream, events in batch:
        stream.push(events)
