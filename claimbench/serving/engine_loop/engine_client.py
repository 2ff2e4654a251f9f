"""ProcessEngine: the server's side of the engine process (engine_core.py).

It offers what AsyncEngine offers (state.ServingEngine: ``add``, ``abort``, ``submit``,
``snapshot``, ``is_alive``, ``heartbeat``), so the routes do not care where the engine
runs. Replies and
step events are read on the server's event loop (``loop.add_reader`` on the pipe: no
reader thread to contend for the lock), each step's events handed to their requests'
streams in one go. Sending is guarded by a lock, so a call may also come from another
thread (``submit``).

If the engine process dies, the pipe reads end of file: every waiting call and stream
gets EngineStopped at once, ``is_alive`` turns false and new requests are refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import multiprocessing
import os
import pickle
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from claimbench.engine.outputs import Event, FinishEvent, RejectEvent
from claimbench.engine.worker.sampler import SamplingParams
from claimbench.serving.engine_loop.async_engine import EngineSnapshot, EngineStopped, RequestStream
from claimbench.serving.engine_loop.engine_core import (
    ABORT,
    ADD,
    BEAT,
    CALL,
    METRICS,
    READY,
    REPLY,
    STEP,
    STOP,
    TOTALS,
    CoreInfo,
    CoreOptions,
    decode_event,
    run_engine_core,
)
from claimbench.serving.monitoring.metric_totals import MetricTotals

log = logging.getLogger("claimbench.serving")
READ_SIZE = 1 << 20  # bytes asked of the pipe per read
START_TIMEOUT_S = 900.0  # building and compiling on a busy CPU host takes minutes at worst


class FrameReader:
    """Whole messages out of a non-blocking pipe written by ``Connection.send_bytes``
    (a 4-byte big-endian length, or -1 and an 8-byte one, then the bytes): a message may
    arrive in pieces, and a piece is kept until the rest comes."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def read(self, fd: int) -> tuple[list[bytes], bool]:
        """The messages complete after reading everything ``fd`` holds now, and whether
        the writer has closed its end. A read shorter than asked for emptied the pipe:
        no second read (and its error) to learn that; the loop calls again when more
        comes, or the end."""
        while True:
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return self.split(), False
            if not chunk:
                return self.split(), True
            self._buffer += chunk
            if len(chunk) < READ_SIZE:
                return self.split(), False

    def split(self) -> list[bytes]:
        """The complete messages at the buffer's front, taken off it."""
        messages, buffer, start = [], self._buffer, 0
        while len(buffer) - start >= 4:
            (size,) = struct.unpack_from("!i", buffer, start)
            header = 4
            if size == -1:
                if len(buffer) - start < 12:
                    break
                (size,) = struct.unpack_from("!Q", buffer, start + 4)
                header = 12
            end = start + header + size
            if len(buffer) < end:
                break
            messages.append(bytes(buffer[start + header : end]))
            start = end
        del buffer[:start]
        return messages


class EngineProcessError(RuntimeError):
    """The engine process could not start (its error, or how it ended)."""


class ProcessEngine:
    """The engine in a spawned process; ``launch()`` (blocking) before serving, ``start()``
    on the event loop that serves, ``stop()`` to end it."""

    def __init__(self, options: CoreOptions) -> None:
        self.options = options
        self.info: CoreInfo | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn = None  # to the engine process (blocking writes)
        self._inbox = None  # from it (read without blocking on the event loop)
        self._frames = FrameReader()
        self._send_lock = threading.Lock()
        self._seq = itertools.count()
        self._replies: dict[int, concurrent.futures.Future] = {}
        self._streams: dict[str, RequestStream] = {}  # request id -> its stream
        self._adding: dict[int, RequestStream] = {}  # ADD's seq -> the stream to register
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False  # the pipe ended (the process is gone) or stop() ran
        self._ending = False  # this side is ending the process: its end is no failure
        self.heartbeat = time.monotonic()
        self.error: BaseException | None = None
        self._pid: int | None = None  # kept once the process is reaped and released
        self._exitcode: int | None = None
        # The engine process's latest metric totals (TOTALS): a replacement starts from them.
        self.metric_totals: MetricTotals | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else self._pid

    @property
    def exitcode(self) -> int | None:
        """How the engine process ended (None while it runs); -9 when killed."""
        return self._process.exitcode if self._process is not None else self._exitcode

    @property
    def is_alive(self) -> bool:
        return self._process is not None and self._process.is_alive() and not self._closed

    def launch(self, timeout_s: float = START_TIMEOUT_S) -> CoreInfo:
        """Spawn the engine process and wait until it has built, compiled and recorded the
        golden completion. EngineProcessError if it fails or ends first."""
        context = multiprocessing.get_context("spawn")  # JAX is not fork-safe
        # Two one-way pipes: the reading end is non-blocking on the event loop, the
        # writing end stays blocking (a message is never half sent).
        their_inbox, our_outbox = context.Pipe(duplex=False)
        our_inbox, their_outbox = context.Pipe(duplex=False)
        process = context.Process(
            target=run_engine_core,
            args=(self.options, their_inbox, their_outbox),
            name="claimbench-engine",
            daemon=True,  # never outlives the server
        )
        process.start()
        their_inbox.close()
        their_outbox.close()
        self._process, self._conn, self._inbox = process, our_outbox, our_inbox
        deadline = time.monotonic() + timeout_s
        while not our_inbox.poll(0.2):
            if not process.is_alive() or time.monotonic() > deadline:
                self._kill()
                code = process.exitcode
                raise EngineProcessError(f"the engine process ended during start-up ({code})")
        try:
            kind, info = pickle.loads(our_inbox.recv_bytes())
        except EOFError as e:
            self._kill()
            raise EngineProcessError("the engine process ended during start-up") from e
        if kind != READY:
            self._kill(grace_s=10.0)  # it exits by itself after reporting
            raise EngineProcessError(info)
        self.info = info
        self.heartbeat = time.monotonic()
        return info

    def start(self) -> None:
        """Read the engine's messages on the running event loop from now on."""
        self._loop = asyncio.get_running_loop()
        os.set_blocking(self._inbox.fileno(), False)
        self._loop.add_reader(self._inbox.fileno(), self._on_readable)

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        """Abort whatever is still in flight (its events still come), end the process."""
        if self._process is None:
            return
        deadline = time.monotonic() + timeout_s
        self._ending = True  # its end from here on is this side's doing, not a crash
        if not self._closed:
            self._send_quietly((STOP,))
        # The reader delivers the last events meanwhile; the pipe ends as the process does.
        while (not self._closed or self._process.is_alive()) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self._kill()  # reaps it (or ends it, past the deadline)

    def kill(self) -> None:
        """End the engine process now, without draining (what a crash looks like)."""
        if self._process is not None:
            self._process.kill()

    # -- calls ---------------------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run ``fn(engine, *args)`` in the engine process; its result in a future. ``fn``
        and the result must pickle (``fn`` a module-level function)."""
        return self._request(CALL, fn, args)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(self.submit(fn, *args))

    async def snapshot(self) -> EngineSnapshot:
        from claimbench.serving.engine_loop.async_engine import snapshot_of

        return await self.call(snapshot_of)

    async def render_metrics(self) -> bytes:
        """/metrics' text, rendered where the metrics are observed (the engine process)."""
        return await asyncio.wrap_future(self._request(METRICS))

    async def add(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        tenant: str,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> RequestStream:
        """Queue a request; its events arrive on the returned stream. ValueError for bad
        arguments, RequestRejected when admission refuses it, EngineStopped when the
        engine process is gone."""
        stream = RequestStream()
        prompt = list(prompt_token_ids)
        future = self._request(ADD, prompt, sampling, tenant, priority, cache_salt, stream=stream)
        await asyncio.wrap_future(future)
        return stream

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Stop a request and free its pages in the engine process; no more events.
        ``reason`` is what /metrics counts it as ("stop" when a stop string ended it)."""
        self._streams.pop(request_id, None)
        if not self._closed:
            self._send_quietly((ABORT, request_id, reason))

    def fail_all(self, message: str) -> None:
        """End every request in flight now: its stream gets EngineStopped(``message``) (a
        stream then ends with an error event and [DONE]) and the engine frees its pages."""
        streams, self._streams = self._streams, {}
        for request_id, stream in streams.items():
            stream.push([EngineStopped(message)])
            if not self._closed:
                self._send_quietly((ABORT, request_id, "abort"))

    def _request(
        self, kind: str, *payload: Any, stream: RequestStream | None = None
    ) -> concurrent.futures.Future:
        """Send a message that gets a REPLY; ``stream`` (for ADD) is registered under the
        request id as the reply is read, before any later step's events are."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self._closed or self._process is None:
            future.set_exception(EngineStopped("the engine process is not running"))
            return future
        with self._send_lock:
            seq = next(self._seq)
            self._replies[seq] = future
            if stream is not None:
                self._adding[seq] = stream
            try:
                self._conn.send_bytes(pickle.dumps((kind, seq, *payload), pickle.HIGHEST_PROTOCOL))
            except OSError:
                del self._replies[seq]
                self._adding.pop(seq, None)
                future.set_exception(EngineStopped("the engine process is not running"))
        return future

    def _send_quietly(self, message: tuple) -> None:
        # Gone: the reader notices the end of the pipe.
        with self._send_lock, contextlib.suppress(OSError):
            self._conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))

    # -- the event loop's reader ----------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            messages, ended = self._frames.read(self._inbox.fileno())
        except OSError:
            messages, ended = [], True
        self.heartbeat = time.monotonic()
        for message in messages:
            self._handle(pickle.loads(message))
        if ended:
            self._on_closed()

    def _handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == STEP:
            self._dispatch([decode_event(fields) for fields in message[1]])
        elif kind == REPLY:
            _, seq, ok, value = message
            future = self._replies.pop(seq, None)
            stream = self._adding.pop(seq, None)
            if stream is not None and ok:
                stream.request_id = value
                self._streams[value] = stream
            if future is not None and future.set_running_or_notify_cancel():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        elif kind == TOTALS:
            self.metric_totals = message[1]
        elif kind != BEAT:
            log.warning("unexpected message from the engine process: %r", kind)

    def _dispatch(self, events: list[Event]) -> None:
        streams = self._streams
        by_stream: dict[str, list[Event]] = {}
        for event in events:
            if event.request_id in streams:
                by_stream.setdefault(event.request_id, []).append(event)
        for request_id, mine in by_stream.items():
            if isinstance(mine[-1], FinishEvent | RejectEvent):
                stream = streams.pop(request_id)
            else:
                stream = streams[request_id]
            stream.push(mine)

    def _on_closed(self) -> None:
        """The engine process is gone: wake everything that waits on it."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._inbox.fileno())
        if not self._ending and self._process is not None:
            # Not ended by this side: a crash, whatever its code. The pipe can close a moment
            # before the process is reaped, so wait for its exit code briefly.
            self._process.join(1.0)
            code = self._process.exitcode
            self.error = EngineProcessError(f"the engine process ended with exit code {code}")
            log.error("%s", self.error)
        stopped = EngineStopped("the engine process ended before the request finished")
        for stream in self._streams.values():
            stream.push([stopped])
        self._streams.clear()
        with self._send_lock:
            replies, self._replies = self._replies, {}
            self._adding.clear()
        for future in replies.values():
            if future.set_running_or_notify_cancel():
                future.set_exception(EngineStopped("the engine process is not running"))

    def _kill(self, grace_s: float = 0.0) -> None:
        """Reap the engine process, killing it if it has not ended within ``grace_s``."""
        self._ending = True
        process = self._process
        if process is not None and grace_s > 0:
            process.join(grace_s)
        if process is not None and process.is_alive():
            process.kill()
        if process is not None:
            process.join(5)
        self._on_closed()
        for conn in (self._conn, self._inbox):
            if conn is not None:
                conn.close()
        if process is not None and process.exitcode is not None:
            # Process.close releases the two pipes its spawn keeps (its sentinel and the
            # one it sent the process's arguments on); without it each restart leaked both.
            self._pid, self._exitcode = process.pid, process.exitcode
            process.close()
            self._process = None
