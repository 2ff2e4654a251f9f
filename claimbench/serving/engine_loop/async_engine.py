"""AsyncEngine: one thread owns the LLMEngine and steps it; asyncio code talks to it by message.

The in-process form of the server's engine loop, for a caller that holds the engine and
reads it afterwards (an experiment served over HTTP, lab/http_serving.py); `claimbench
serve` runs the engine in its own process instead (engine_core.py, engine_client.py). The
shared pieces live here: RequestStream, StreamInterval, the admission errors.

The engine is plain single-threaded host state, so nothing inside it takes a lock: every
call into it runs on the engine thread. Asyncio code sends closures through a queue
(``call``) and gets a future back; each request's events go to its own ``RequestStream``,
handed over with one ``loop.call_soon_threadsafe`` per step and event loop (not one per
token: at 16 streams that would be 16 wake-ups of the server's loop per step).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import Event, FinishEvent, RejectEvent, RejectKind, TokenEvent
from claimbench.engine.worker.sampler import SamplingParams

T = TypeVar("T")
log = logging.getLogger("claimbench.serving")
IDLE_WAIT_S = 0.05  # how long an idle loop sleeps on its inbox (the liveness heartbeat)
# Step records a server keeps (the newest): enough for /metrics-style looks back, bounded so
# a server that runs for weeks does not grow. Trimmed in batches of as many again.
KEEP_STEP_RECORDS = 10_000
# Finished requests a server keeps (the newest), for a look at what just ran; older ones are
# forgotten by the engine once their events were delivered.
KEEP_FINISHED_REQUESTS = 1024


class RequestRejected(Exception):
    """The engine refused a request at admission. ``over_limit``: a tenant's ingress limit
    (retry later) rather than a request that can never be served."""

    def __init__(self, reason: str, kind: RejectKind, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.over_limit = kind == RejectKind.OVER_LIMIT
        self.retry_after_s = retry_after_s  # when a tenant's token bucket will hold it

    def __reduce__(self):  # it crosses from the engine process to the server
        return RequestRejected, (self.reason, self.kind, self.retry_after_s)


def add_admitted(
    engine: LLMEngine,
    prompt_token_ids: Sequence[int],
    sampling: SamplingParams,
    *,
    tenant: str,
    priority: int,
    cache_salt: str | None,
) -> str:
    """Add a request to ``engine`` (on the thread or in the process that owns it); its id.
    ValueError for bad arguments; RequestRejected, with the engine's reason, kind and
    retry-after, when admission refuses it (its RejectEvent is then nobody's to deliver)."""
    request_id = engine.add_request(
        prompt_token_ids, sampling, tenant=tenant, priority=priority, cache_salt=cache_salt
    )
    rejection = engine.rejection(request_id)
    if rejection is not None:
        raise RequestRejected(rejection.reason, rejection.kind, rejection.retry_after_s)
    return request_id


class EngineStopped(Exception):
    """The engine loop has stopped (shut down or failed); no request can be served."""


class RequestFailed(Exception):
    """The engine could not run this request's own values (its finish reason "error");
    every other request goes on."""


@dataclass(frozen=True)
class EngineSnapshot:
    """What the server reports about the engine, read on the engine thread."""

    running: dict[str, int]  # requests running per tenant
    waiting: dict[str, int]  # requests waiting per tenant
    tenant_pages: dict[str, int]  # KV page references held per tenant
    num_free_pages: int
    num_usable_pages: int


Observer = Callable[[LLMEngine, list[Event]], None]


class RequestStream:
    """One request's events, as the engine delivers them, read on the server's event loop.

    A deque and one waiter future rather than an asyncio.Queue: a step's events for a
    request arrive together and are taken together, one wake-up per step. A reader that
    only wants the whole output (``wake_at_end``) is woken once, by its last event.

    A ``listener`` may take a step's events as they are pushed, with no reader woken: it
    returns True when it took them all, False (having taken none) to let them queue. It is
    offered events only while nothing is queued, so nothing overtakes a queued event."""

    # Streams whose last event has arrived, over all servers in the process: /metrics
    # renders a new page once one has (metrics_page.py), else reuses its last for a while.
    num_ended = 0

    def __init__(self, request_id: str = "") -> None:
        self.request_id = request_id
        self.listener: Callable[[Sequence[Event | Exception]], bool] | None = None
        self._events: collections.deque[Event | Exception] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._at_end_only = False
        self._ended = False  # the last event (a finish, a rejection or an error) is queued

    def wake_at_end(self) -> None:
        """From now on, wake the reader only once the request's last event is queued."""
        self._at_end_only = True

    def push(self, events: Sequence[Event | Exception]) -> None:
        """Add events (on the event loop's thread) and wake the reader, unless the
        listener takes them."""
        if events and isinstance(events[-1], FinishEvent | RejectEvent | Exception):
            RequestStream.num_ended += 1
        listener = self.listener
        if listener is not None and not self._events and listener(events):
            return
        self._events.extend(events)
        if events and isinstance(events[-1], FinishEvent | RejectEvent | Exception):
            self._ended = True
        elif self._at_end_only:
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        while not self._events or (self._at_end_only and not self._ended):
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def next(self) -> Event:
        """The next event; EngineStopped if the loop died before the request finished."""
        await self._wait()
        event = self._events.popleft()
        if isinstance(event, Exception):
            raise event
        return event

    async def next_batch(self) -> list[Event]:
        """Every event queued (waiting for one if there is none): a consumer that fell
        behind the engine catches up in one go instead of one wake-up per token."""
        await self._wait()
        batch = []
        while self._events:
            event = self._events.popleft()
            if isinstance(event, Exception):
                if batch:  # what came before the failure first; it stays queued
                    self._events.appendleft(event)
                    return batch
                raise event
            batch.append(event)
        return batch


class StreamInterval:
    """Holds a request's tokens back until every ``interval``-th one (its first token and
    its finish go at once): fewer hand-overs and SSE writes per token, as vLLM's
    --stream-interval, at the price of a coarser stream."""

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise ValueError(f"stream_interval must be >= 1, got {interval}")
        self.interval = interval
        self._held: dict[str, list[Event]] = {}  # tokens not yet handed over

    def hand_over(self, event: Event, last: bool) -> list[Event]:
        """The events of ``event``'s request to hand over now: none while its tokens are
        held back, else every held one and ``event``."""
        if self.interval == 1:
            return [event]
        held = self._held.setdefault(event.request_id, [])
        held.append(event)
        due = isinstance(event, TokenEvent) and event.index % self.interval == 0
        if not (last or due):
            return []
        del self._held[event.request_id]
        return held

    def drop(self, request_id: str) -> None:
        """Forget what is held for a request nobody listens to any more."""
        self._held.pop(request_id, None)


class AsyncEngine:
    """Runs ``engine`` on its own thread; start() before use, stop() to end.

    ``observer`` (metrics) sees every step's events on the engine thread. Only the newest
    ``keep_finished_requests`` finished requests (older ones are forgotten once their events
    were delivered) and ``keep_step_records`` step records are kept, so memory stays bounded
    however long the server runs."""

    def __init__(
        self,
        engine: LLMEngine,
        observer: Observer | None = None,
        *,
        keep_finished_requests: int = KEEP_FINISHED_REQUESTS,
        keep_step_records: int = KEEP_STEP_RECORDS,
        stream_interval: int = 1,
    ) -> None:
        self._engine = engine
        self._observer = observer
        self._interval = StreamInterval(stream_interval)  # engine thread only
        self._keep_step_records = keep_step_records
        # Engine thread only: finished requests, oldest first, until the engine forgets them.
        self._finished: collections.deque[str] = collections.deque()
        self._keep_finished = keep_finished_requests
        # Calls waiting for the engine thread, each with the future of its result.
        self._inbox: queue.SimpleQueue[tuple[Callable, concurrent.futures.Future]] = (
            queue.SimpleQueue()
        )
        # Engine thread only: request id -> (its event loop, its stream).
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, RequestStream]] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="claimbench-engine", daemon=True)
        self.heartbeat = time.monotonic()  # last time the loop went round
        self.error: BaseException | None = None  # what killed the loop, if anything

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Abort whatever is still in flight, deliver its events, and end the loop."""
        if self._thread.is_alive():
            self._stopping.set()
            self._inbox.put((lambda engine: None, concurrent.futures.Future()))  # wake it
            self._thread.join(timeout_s)

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        """``stop()``, from the event loop (it blocks it until the thread has ended)."""
        self.stop(timeout_s)

    # -- calls from asyncio ---------------------------------------------------------------

    def submit(self, fn: Callable[[LLMEngine], T]) -> concurrent.futures.Future[T]:
        """Run ``fn(engine)`` on the engine thread; its result (or exception) in a future."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        if not self.is_alive or self._stopping.is_set():
            future.set_exception(EngineStopped("the engine loop is not running"))
            return future
        self._inbox.put((fn, future))
        if not self._thread.is_alive():
            self._fail_calls()  # it ended between the check and the put
        return future

    async def call(self, fn: Callable[[LLMEngine], T]) -> T:
        return await asyncio.wrap_future(self.submit(fn))

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
        arguments, RequestRejected when admission refuses it (nothing is then left queued)."""
        loop = asyncio.get_running_loop()
        stream = RequestStream()

        def add(engine: LLMEngine) -> str:
            request_id = add_admitted(
                engine,
                list(prompt_token_ids),
                sampling,
                tenant=tenant,
                priority=priority,
                cache_salt=cache_salt,
            )
            self._sinks[request_id] = (loop, stream)
            return request_id

        stream.request_id = await self.call(add)
        return stream

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Stop a request and free its pages now (on the engine thread); no more events.
        ``reason`` is what /metrics counts it as ("stop" when a stop string ended it)."""

        def abort(engine: LLMEngine) -> None:
            self._sinks.pop(request_id, None)
            self._interval.drop(request_id)
            if request_id in engine.requests:
                engine.abort(request_id, reason)

        if self.is_alive:
            self.submit(abort)

    def fail_all(self, message: str) -> None:
        """End every request in flight now: its stream gets EngineStopped(``message``) and
        the engine frees its pages."""

        def fail(engine: LLMEngine) -> None:
            sinks, self._sinks = self._sinks, {}
            for request_id, (loop, stream) in sinks.items():
                self._interval.drop(request_id)
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(stream.push, [EngineStopped(message)])
                if request_id in engine.requests:
                    engine.abort(request_id)

        if self.is_alive:
            self.submit(fail)

    def reset(self, timeout_s: float = 60.0) -> None:
        """Empty the engine (``LLMEngine.reset``) on its thread, between runs of a harness;
        blocks until done. Nothing may be in flight."""

        def reset(engine: LLMEngine) -> None:
            if engine.has_unfinished:
                raise ValueError("reset with requests in flight")
            engine.reset()
            self._finished.clear()  # request ids start again from req-0

        self.submit(reset).result(timeout_s)

    async def snapshot(self) -> EngineSnapshot:
        return await self.call(snapshot_of)

    # -- the engine thread ----------------------------------------------------------------

    def _loop(self) -> None:
        engine = self._engine
        try:
            while not self._stopping.is_set():
                self._run_inbox(wait=not engine.has_unfinished)
                if engine.has_unfinished:
                    self._deliver(engine.step())
                self.heartbeat = time.monotonic()
            self._run_inbox(wait=False)
            for request_id, request in engine.requests.items():
                if not request.is_finished:
                    engine.abort(request_id, "abort")
            while engine.has_unfinished:
                self._deliver(engine.step())
        except Exception as e:  # a bug or a device failure: /health reports it, waiters wake
            self.error = e
            log.exception("the engine loop failed")
        finally:
            self._fail_waiters()

    def _run_inbox(self, wait: bool) -> None:
        try:
            call = self._inbox.get(timeout=IDLE_WAIT_S) if wait else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            fn, future = call
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(self._engine))
                except Exception as e:  # the caller's error (bad input), not the loop's
                    future.set_exception(e)
            try:
                call = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _deliver(self, events: list[Event]) -> None:
        engine = self._engine
        if self._observer is not None:
            self._observer(engine, events)
        batches: dict[asyncio.AbstractEventLoop, list[tuple[RequestStream, list[Event]]]]
        batches = defaultdict(list)
        for event in events:
            last = isinstance(event, FinishEvent | RejectEvent)
            if last:
                self._finished.append(event.request_id)
            sink = (
                self._sinks.pop(event.request_id, None)
                if last
                else self._sinks.get(event.request_id)
            )
            if sink is None:
                self._interval.drop(event.request_id)
                continue  # aborted by its client, or a rejection already raised
            ready = self._interval.hand_over(event, last)
            if ready:
                batches[sink[0]].append((sink[1], ready))
        for loop, batch in batches.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening
                loop.call_soon_threadsafe(_put_all, batch)
        while len(self._finished) > self._keep_finished:
            engine.forget(self._finished.popleft())  # its last event went out: done with it
        if len(engine.step_records) >= 2 * self._keep_step_records:
            engine.trim_step_records(self._keep_step_records)

    def _fail_waiters(self) -> None:
        """Tell every request still waiting for events (and every queued call) that the
        loop is gone, so no handler waits forever."""
        stopped = EngineStopped("the engine loop stopped before the request finished")
        for loop, stream in self._sinks.values():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stream.push, [stopped])
        self._sinks.clear()
        self._fail_calls()

    def _fail_calls(self) -> None:
        while True:
            try:
                _, future = self._inbox.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(EngineStopped("the engine loop is not running"))


def _put_all(batch: list[tuple[RequestStream, list[Event]]]) -> None:
    for stream, events in batch:
        stream.push(events)


def snapshot_of(engine: LLMEngine) -> EngineSnapshot:
    """The engine's snapshot, read where the engine lives."""
    stats = engine.stats()
    return EngineSnapshot(
        running=stats.running_per_tenant,
        waiting=stats.waiting_per_tenant,
        tenant_pages=stats.pages_per_tenant,
        num_free_pages=stats.num_usable_pages - stats.num_used_pages,
        num_usable_pages=stats.num_usable_pages,
    )
