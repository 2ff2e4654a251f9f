"""EngineClient: the server's side of the engine loop (engine_core.py), wherever it runs.

What the routes use (``add``, ``abort``, ``fail_all``, ``snapshot``, ``render_metrics``,
``is_alive``, ``heartbeat``) is here, over the messages of
protocol.py; how a message travels is a subclass's: a spawned process and its pipes
(process_engine.py, what `claimbench serve` runs) or a thread of this process
(thread_engine.py, for a caller that reads its engine afterwards). Replies and step
events are handled on the server's event loop, each step's events handed to their
requests' streams in one go. Sending is guarded by a lock, so a request may also come from
another thread (``diagnose``, ``reset``).

When the loop ends unasked, every waiting request and stream gets EngineStopped at once,
``is_alive`` turns false and new requests are refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from claimbench.engine.outputs import Event, FinishEvent, RejectEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.engine_loop import diagnostics
from claimbench.serving.engine_loop.protocol import (
    AbortRequest,
    AddRequest,
    Beat,
    CoreInfo,
    CoreOptions,
    DiagnosticRequest,
    EngineStopped,
    FromEngine,
    MetricsRequest,
    Reply,
    ResetRequest,
    SnapshotRequest,
    StepEvents,
    ToEngine,
    Totals,
    decode_event,
)
from claimbench.serving.engine_loop.request_stream import RequestStream
from claimbench.serving.monitoring.metric_totals import MetricTotals
from claimbench.serving.monitoring.snapshot import EngineSnapshot

log = logging.getLogger("claimbench.serving")


class EngineClient:
    """Requests to the engine loop and their answers; a subclass sends (``_send``) and
    hands every message that comes back to ``_handle`` on the event loop."""

    what = "the engine loop"  # as errors name it

    def __init__(self, options: CoreOptions) -> None:
        self.options = options
        self.info: CoreInfo | None = None
        self._send_lock = threading.Lock()
        self._seq = itertools.count()
        self._replies: dict[int, concurrent.futures.Future] = {}
        self._streams: dict[str, RequestStream] = {}  # request id -> its stream
        self._adding: dict[int, RequestStream] = {}  # an AddRequest's seq -> its stream
        self._closed = False  # the loop has ended (or is ending): nothing more is sent
        self.heartbeat = time.monotonic()  # when the loop was last heard from
        self.error: BaseException | None = None
        # The loop's latest metric totals (Totals): a replacement starts from them.
        self.metric_totals: MetricTotals | None = None

    @property
    def is_alive(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        """Hand what comes back to the running event loop from now on."""
        raise NotImplementedError

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        """Abort whatever is still in flight (its events still come) and end the loop."""
        raise NotImplementedError

    def _send(self, message: ToEngine) -> None:
        """Hand ``message`` to the loop; OSError when it cannot take it any more."""
        raise NotImplementedError

    # -- requests ------------------------------------------------------------------------

    def diagnose(self, name: str, *args: Any) -> concurrent.futures.Future:
        """Run the named diagnostic (diagnostics.py) where the engine lives; its result in a
        future. ValueError at once for a name or arguments it does not take."""
        diagnostics.check(name, args)
        return self._request(lambda seq: DiagnosticRequest(seq, name, args))

    async def diagnostic(self, name: str, *args: Any) -> Any:
        return await asyncio.wrap_future(self.diagnose(name, *args))

    async def snapshot(self) -> EngineSnapshot:
        return await asyncio.wrap_future(self._request(SnapshotRequest))

    async def render_metrics(self) -> bytes:
        """/metrics' text, rendered where the metrics are observed (the engine loop)."""
        return await asyncio.wrap_future(self._request(MetricsRequest))

    def reset(self, timeout_s: float = 60.0) -> None:
        """Empty the engine (``LLMEngine.reset``) between runs of a harness; blocks until
        done. Nothing may be in flight (ValueError)."""
        self._request(ResetRequest).result(timeout_s)

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
        engine loop is gone."""
        stream = self._new_stream()
        prompt = list(prompt_token_ids)

        def message(seq: int) -> AddRequest:
            return AddRequest(seq, prompt, sampling, tenant, priority, cache_salt)

        await asyncio.wrap_future(self._request(message, stream=stream))
        return stream

    def _new_stream(self) -> RequestStream:
        return RequestStream()

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Stop a request and free its pages; no more events. ``reason`` is what /metrics
        counts it as ("stop" when a stop string ended it)."""
        self._streams.pop(request_id, None)
        self._send_quietly(AbortRequest(request_id, reason))

    def fail_all(self, message: str) -> None:
        """End every request in flight now: its stream gets EngineStopped(``message``) (a
        stream then ends with an error event and [DONE]) and the engine frees its pages."""
        streams, self._streams = self._streams, {}
        for request_id, stream in streams.items():
            stream.push([EngineStopped(message)])
            self._send_quietly(AbortRequest(request_id, "abort"))

    def _request(
        self, message: Callable[[int], ToEngine], stream: RequestStream | None = None
    ) -> concurrent.futures.Future:
        """Send ``message(seq)``, which gets a Reply; ``stream`` (for an AddRequest) is
        registered under the request id as the reply is handled, before any later step's
        events are."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self._closed or not self._started:
            future.set_exception(EngineStopped(f"{self.what} is not running"))
            return future
        with self._send_lock:
            seq = next(self._seq)
            self._replies[seq] = future
            if stream is not None:
                self._adding[seq] = stream
            try:
                self._send(message(seq))
            except OSError:
                del self._replies[seq]
                self._adding.pop(seq, None)
                future.set_exception(EngineStopped(f"{self.what} is not running"))
        return future

    @property
    def _started(self) -> bool:
        """Whether the loop runs (or ran): a subclass's."""
        raise NotImplementedError

    def _send_quietly(self, message: ToEngine) -> None:
        # Gone: the end of the loop is noticed on its own.
        if self._closed:
            return
        with self._send_lock, contextlib.suppress(OSError):
            self._send(message)

    # -- what comes back, on the event loop ------------------------------------------------

    def _handle(self, message: FromEngine) -> None:
        self.heartbeat = time.monotonic()
        match message:
            case StepEvents(events):
                self._dispatch([decode_event(fields) for fields in events])
            case Reply(seq, ok, value):
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
            case Totals(totals):
                self.metric_totals = totals
            case Beat():
                pass
            case _:
                log.warning("unexpected message from the engine loop: %r", message)

    def _dispatch(self, events: list[Event]) -> None:
        """Hand a step's events to their requests' streams, each its own in one go."""
        streams = self._streams
        by_stream: dict[str, list[Event]] = {}
        for event in events:
            if event.request_id in streams:
                by_stream.setdefault(event.request_id, []).append(event)
        batch = []
        for request_id, mine in by_stream.items():
            if isinstance(mine[-1], FinishEvent | RejectEvent):
                batch.append((streams.pop(request_id), mine))
            else:
                batch.append((streams[request_id], mine))
        self._push(batch)

    def _push(self, batch: list[tuple[RequestStream, list[Event | Exception]]]) -> None:
        """Push each stream its events (here on the event loop; a subclass may differ)."""
        for stream, events in batch:
            stream.push(events)

    def _fail_waiters(self) -> None:
        """The loop is gone: wake every stream and request that waits on it."""
        self._closed = True
        stopped = EngineStopped(f"{self.what} ended before the request finished")
        streams, self._streams = self._streams, {}
        self._push([(stream, [stopped]) for stream in streams.values()])
        with self._send_lock:
            replies, self._replies = self._replies, {}
            self._adding.clear()
        for future in replies.values():
            if future.set_running_or_notify_cancel():
                future.set_exception(EngineStopped(f"{self.what} is not running"))
