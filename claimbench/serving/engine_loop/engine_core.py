"""The engine loop: it owns the LLMEngine, steps it and answers by message (protocol.py).

The HTTP server, its event loop and the engine share Python's global lock when they share
a process: at 16 streams the server's per-token work (SSE chunks, detokenization) and the
engine's host work (scheduling, step building) take turns on one core. As vLLM splits
AsyncLLM from EngineCore, `claimbench serve` runs this loop in its own process and the
server talks to it over a pipe (``PipeChannel``; process_engine.py). The engine is built
inside that process (``run_engine_core``): JAX is not safe to fork once initialized, so the
process is spawned. An experiment that reads its engine afterwards runs the same loop on a
thread of its own process (thread_engine.py), over the same messages.

A step's events go out in one ``StepEvents`` (not a message per token), and ``Beat`` when
nothing else went out for ``HEARTBEAT_S``. The process ignores SIGINT and SIGTERM (the
server decides when it ends) and exits when the server's end of the pipe closes.

With async scheduling, after a step that finished requests the loop waits, while the next
step runs on the device, for the requests their clients send next (``_await_replacements``):
they then join the step after it, as they do in process, instead of one step later.
"""

from __future__ import annotations

import collections
import logging
import math
import pickle
import select
import signal
import time
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Protocol

from claimbench.engine.engine import LLMEngine
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
    Failed,
    FromEngine,
    MetricsRequest,
    Ready,
    Reply,
    RequestRejected,
    ResetRequest,
    SnapshotRequest,
    StepEvents,
    StopRequest,
    ToEngine,
    Totals,
    encode_event,
)
from claimbench.serving.engine_loop.request_stream import StreamInterval
from claimbench.serving.monitoring.health import GOLDEN_PROMPT, record_golden
from claimbench.serving.monitoring.metric_totals import TOTALS_S
from claimbench.serving.monitoring.metrics import ServerMetrics
from claimbench.serving.monitoring.snapshot import snapshot_of

log = logging.getLogger("claimbench.serving")
HEARTBEAT_S = 0.5  # the longest the loop stays silent while it goes round
REPLACEMENT_WAIT_SHARE = 0.5  # of the last step's device time, at most, per wait
POLL_S = 0.0005  # how often the wait checks whether the step in flight has ended
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"  # jax.monitoring's, per program loaded


class Channel(Protocol):
    """The engine loop's two directions: a pipe to another process, or a queue and the
    server's event loop in this one."""

    def readable(self, timeout_s: float) -> bool:
        """Whether a message (or the end of the server's side) waits, within ``timeout_s``."""
        ...

    def receive(self) -> ToEngine | None:
        """The message waiting; None once the server's end is closed."""
        ...

    def send(self, message: FromEngine) -> None: ...


class PipeChannel:
    """Messages pickled over two one-way pipes (``Connection.send_bytes``)."""

    def __init__(self, inbox: Connection, outbox: Connection) -> None:
        self.inbox, self.outbox = inbox, outbox
        # One poll object for the loop's checks: Connection.poll builds a selector per call
        # (about 8 µs; this, under 1), and the loop checks at least once a step.
        self._poller = select.poll()
        self._poller.register(inbox.fileno(), select.POLLIN)

    def readable(self, timeout_s: float) -> bool:
        # Rounded up to whole milliseconds, as Connection.poll does.
        return bool(self._poller.poll(math.ceil(timeout_s * 1000)))

    def receive(self) -> ToEngine | None:
        try:
            return pickle.loads(self.inbox.recv_bytes())
        except EOFError:
            return None

    def send(self, message: FromEngine) -> None:
        self.outbox.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def prepare(engine: LLMEngine, precompile: bool) -> CoreInfo:
    """Compile the step shapes (when ``precompile``) and record the golden completion on
    ``engine`` (idle, not yet looping). ValueError for an engine without a tokenizer."""
    num, seconds = engine.precompile() if precompile else (0, 0.0)
    if engine.tokenizer is None:
        raise ValueError("the server needs an engine with a tokenizer")
    prompt_ids = engine.tokenizer.encode(GOLDEN_PROMPT)
    golden = record_golden(engine, prompt_ids)
    return CoreInfo(
        prompt_ids,
        golden,
        engine.config.scheduler.max_model_len,
        num,
        seconds,
        engine.async_scheduling,
    )


def run_engine_core(options: CoreOptions, inbox: Connection, outbox: Connection) -> None:
    """The engine process's entry point: build, report Ready (or Failed), serve.
    ``inbox`` and ``outbox`` are the two one-way pipes from and to the server."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from jax import monitoring

    from claimbench.engine.build import build_engine

    channel = PipeChannel(inbox, outbox)
    cache_hits = []  # a restart with the persistent compilation cache loads, not compiles

    def on_event(event: str, **kwargs: object) -> None:
        if event == CACHE_HIT_EVENT:
            cache_hits.append(event)

    monitoring.register_event_listener(on_event)
    try:
        engine = build_engine(options.config)
        info = prepare(engine, options.precompile)
    except Exception as e:  # reported to the server, which fails its start-up with it
        message = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        channel.send(Failed((message.splitlines() or [""])[0]))
        return
    finally:
        monitoring.unregister_event_listener(on_event)
    channel.send(Ready(replace(info, num_cache_hits=len(cache_hits))))
    try:
        EngineCore(engine, options, channel).run()
    except (BrokenPipeError, ConnectionResetError):
        return


class EngineCore:
    """The engine loop: run what came in, step, send the step's events."""

    def __init__(self, engine: LLMEngine, options: CoreOptions, channel: Channel) -> None:
        self.engine = engine
        self.channel = channel
        self.metrics = ServerMetrics(options.carried_metrics)
        self.totals_sent = time.monotonic()
        self.steps_at_totals = 0  # the engine's step count when totals last went out
        self.interval = StreamInterval(options.stream_interval)
        self.keep_finished = options.keep_finished_requests
        self.keep_step_records = options.keep_step_records
        self.live: set[str] = set()  # requests whose events the server still wants
        self.finished: collections.deque[str] = collections.deque()
        self.stopping = False
        self.last_sent = time.monotonic()

    def run(self) -> None:
        """Serve until a StopRequest (then drain) or the server's end closes. A bug or a
        device failure is logged and raised: the server sees the loop end."""
        engine = self.engine
        try:
            while not self.stopping:
                if not self._receive(wait=not engine.has_unfinished):
                    return  # the server is gone: nobody to serve
                if engine.has_unfinished:
                    finished = self._deliver(engine.step())
                    if finished and not self._await_replacements(finished):
                        return
                now = time.monotonic()
                if now - self.totals_sent > TOTALS_S and engine.num_steps != self.steps_at_totals:
                    self._send_totals()
                if now - self.last_sent > HEARTBEAT_S:
                    self._send(Beat())
            for request_id, request in engine.requests.items():
                if not request.is_finished:
                    engine.abort(request_id, "abort")
            while engine.has_unfinished:
                self._deliver(engine.step())
        except (BrokenPipeError, ConnectionResetError):
            raise  # the server's end is gone: nobody left to tell
        except Exception:
            log.exception("the engine loop failed")
            raise

    # -- in ---------------------------------------------------------------------------

    def _receive(self, wait: bool) -> bool:
        """Handle every message waiting (the first up to HEARTBEAT_S away when ``wait``);
        False once the server's end is closed."""
        timeout = HEARTBEAT_S if wait else 0.0
        while self.channel.readable(timeout):
            timeout = 0.0
            if self._take() is None:
                return False
        return True

    def _take(self) -> ToEngine | None:
        """Read and handle the message waiting; None once the server's end is closed."""
        message = self.channel.receive()
        if message is not None:
            self._handle(message)
        return message

    def _await_replacements(self, finished: int) -> bool:
        """Wait, while the dispatched step still runs, for up to ``finished`` new requests.

        A closed-loop client sends its next request as soon as its last one ends. In
        process it is added before the next step is scheduled; here it crosses two pipes
        and the server, and the loop would schedule the next step before it arrives, so it
        would start a step later. Waiting costs nothing while the step in flight runs (the
        next one could only queue behind it); the wait ends at half the last step's device
        time, so the next step is still dispatched before the device runs dry. False once
        the server's end is closed."""
        engine = self.engine
        records = engine.step_records
        budget = REPLACEMENT_WAIT_SHARE * records[-1].device_s if records else 0.0
        deadline = time.perf_counter() + budget
        adds = 0
        while adds < finished and engine.step_in_flight():
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            if not self.channel.readable(min(left, POLL_S)):
                continue
            message = self._take()
            if message is None:
                return False
            adds += isinstance(message, AddRequest)
        return True

    def _handle(self, message: ToEngine) -> None:
        match message:
            case AddRequest():
                self._reply(message.seq, self._add, message)
            case AbortRequest(request_id, reason):
                self.live.discard(request_id)
                self.interval.drop(request_id)
                request = self.engine.requests.get(request_id)
                if request is not None and not request.is_finished:
                    self.engine.abort(request_id, reason)
            case SnapshotRequest(seq):
                self._reply(seq, snapshot_of, self.engine)
            case MetricsRequest(seq):
                # The totals first: once a scraper has the page, the server holds totals at
                # least as high (a replacement then never starts below what was read).
                self._send_totals()
                self._reply(seq, self._render_metrics)
            case ResetRequest(seq):
                self._reply(seq, self._reset)
            case DiagnosticRequest(seq, name, args):
                self._reply(seq, diagnostics.run, self.engine, name, args)
            case StopRequest():
                self.stopping = True
            case _:
                log.warning("unexpected message to the engine loop: %r", message)

    def _reply(self, seq: int, fn, *args) -> None:
        try:
            value, ok = fn(*args), True
        except Exception as e:  # the caller's error (bad input), not the loop's
            value, ok = _portable(e), False
        try:
            self._send(Reply(seq, ok, value))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            self._send(Reply(seq, False, TypeError(f"the reply cannot be pickled: {e}")))

    def _add(self, message: AddRequest) -> str:
        request_id = add_admitted(
            self.engine,
            message.prompt_token_ids,
            message.sampling,
            tenant=message.tenant,
            priority=message.priority,
            cache_salt=message.cache_salt,
        )
        self.live.add(request_id)
        return request_id

    def _reset(self) -> None:
        if self.engine.has_unfinished:
            raise ValueError("reset with requests in flight")
        self.engine.reset()
        self.finished.clear()  # request ids start again from req-0

    def _render_metrics(self) -> bytes:
        return self.metrics.render(snapshot_of(self.engine))

    # -- out --------------------------------------------------------------------------

    def _deliver(self, events: list[Event]) -> int:
        """Send the step's events; the number of live requests that finished."""
        engine = self.engine
        out: list[Event] = []
        finished = 0
        for event in events:
            last = isinstance(event, FinishEvent | RejectEvent)
            if last:
                self.finished.append(event.request_id)
            if event.request_id not in self.live:
                self.interval.drop(event.request_id)
                continue  # aborted by its client, or a rejection already answered
            if last:
                self.live.discard(event.request_id)
                finished += 1
            out += self.interval.hand_over(event, last)
        if out:
            self._send(StepEvents([encode_event(e) for e in out]))
        self.metrics.observe(engine, events)  # after the send: the server reads meanwhile
        while len(self.finished) > self.keep_finished:
            engine.forget(self.finished.popleft())  # its last event went out: done with it
        if len(engine.step_records) >= 2 * self.keep_step_records:
            engine.trim_step_records(self.keep_step_records)
        return finished

    def _send_totals(self) -> None:
        self._send(Totals(self.metrics.totals()))
        self.totals_sent = time.monotonic()
        self.steps_at_totals = self.engine.num_steps

    def _send(self, message: FromEngine) -> None:
        self.channel.send(message)
        self.last_sent = time.monotonic()


def add_admitted(
    engine: LLMEngine,
    prompt_token_ids: Sequence[int],
    sampling: SamplingParams,
    *,
    tenant: str,
    priority: int,
    cache_salt: str | None,
) -> str:
    """Add a request to ``engine``; its id. ValueError for bad arguments; RequestRejected,
    with the engine's reason, kind and retry-after, when admission refuses it (its
    RejectEvent is then nobody's to deliver)."""
    request_id = engine.add_request(
        prompt_token_ids, sampling, tenant=tenant, priority=priority, cache_salt=cache_salt
    )
    rejection = engine.rejection(request_id)
    if rejection is not None:
        raise RequestRejected(rejection.reason, rejection.kind, rejection.retry_after_s)
    return request_id


def _portable(error: Exception) -> Exception:
    """``error`` if it survives pickling whole, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error
