"""The engine process: one process owns the LLMEngine, steps it and answers by message.

The HTTP server, its event loop and the engine share Python's global lock when they share
a process: at 16 streams the server's per-token work (SSE chunks, detokenization) and the
engine's host work (scheduling, step building) take turns on one core. As vLLM splits
AsyncLLM from EngineCore, the engine runs here in its own process and the server talks
to it over a pipe (``engine_client.ProcessEngine``). The engine is built inside this
process (``build_engine``): JAX is not safe to fork once initialized, so the process is
spawned.

Messages are pickled tuples. In: ``(ADD, seq, prompt_ids, sampling, tenant, priority,
cache_salt)``, ``(ABORT, request_id, reason)``, ``(CALL, seq, fn, args)``, ``(METRICS, seq)``,
``(STOP,)``. Out: ``(READY, info)`` (or ``(FAILED, message)``) once, then
``(REPLY, seq, ok, value)`` for each ADD/CALL/METRICS, ``(TOTALS, metric_totals)`` after
each METRICS and every TOTALS_S while it steps (metric_totals.py), ``(STEP, events)`` with every
event of one engine step (not a message per token) as plain tuples (``encode_event``: a
third of a dataclass's pickling time, paid on the engine's own loop), and ``(BEAT,)`` when
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
from dataclasses import dataclass
from multiprocessing.connection import Connection

from claimbench.engine.config import EngineConfig
from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import Event, FinishEvent, RejectEvent, TokenEvent
from claimbench.serving.engine_loop.async_engine import (
    KEEP_FINISHED_REQUESTS,
    KEEP_STEP_RECORDS,
    StreamInterval,
    add_admitted,
    snapshot_of,
)
from claimbench.serving.monitoring.health import GOLDEN_PROMPT, record_golden
from claimbench.serving.monitoring.metric_totals import TOTALS_S, MetricTotals
from claimbench.serving.monitoring.metrics import ServerMetrics

log = logging.getLogger("claimbench.serving")
ADD, ABORT, CALL, METRICS, STOP = "add", "abort", "call", "metrics", "stop"
READY, FAILED, REPLY, STEP, BEAT = "ready", "failed", "reply", "step", "beat"
TOTALS = "totals"
HEARTBEAT_S = 0.5  # the longest the process stays silent while its loop goes round
REPLACEMENT_WAIT_SHARE = 0.5  # of the last step's device time, at most, per wait
POLL_S = 0.0005  # how often the wait checks whether the step in flight has ended
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"  # jax.monitoring's, per program loaded


@dataclass(frozen=True)
class CoreOptions:
    """What the engine process is started with (pickled to it)."""

    config: EngineConfig
    precompile: bool = True
    stream_interval: int = 1  # tokens per hand-over at most (first token and finish at once)
    keep_finished_requests: int = KEEP_FINISHED_REQUESTS
    keep_step_records: int = KEEP_STEP_RECORDS
    carried_metrics: MetricTotals | None = None  # a dead predecessor's (metric_totals.py)

    def __post_init__(self) -> None:
        if self.stream_interval < 1:
            raise ValueError(f"stream_interval must be >= 1, got {self.stream_interval}")


@dataclass(frozen=True)
class CoreInfo:
    """What the engine process reports once it is ready to serve."""

    golden_prompt_ids: list[int]
    golden_tokens: list[int]
    max_model_len: int
    num_compiled: int  # step shapes compiled before serving (0 without precompile)
    compile_s: float
    async_scheduling: bool  # steps overlap; the loop then waits for replacements meanwhile
    num_cache_hits: int = 0  # programs loaded from the persistent compilation cache


def run_engine_core(options: CoreOptions, inbox: Connection, outbox: Connection) -> None:
    """The engine process's entry point: build, report READY (or the error), serve.
    ``inbox`` and ``outbox`` are the two one-way pipes from and to the server."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from jax import monitoring

    from claimbench.engine.build import build_engine

    cache_hits = []  # a restart with the persistent compilation cache loads, not compiles

    def on_event(event: str, **kwargs: object) -> None:
        if event == CACHE_HIT_EVENT:
            cache_hits.append(event)

    monitoring.register_event_listener(on_event)
    try:
        engine = build_engine(options.config)
        num, seconds = engine.precompile() if options.precompile else (0, 0.0)
        if engine.tokenizer is None:
            raise ValueError("the server needs an engine with a tokenizer")
        prompt_ids = engine.tokenizer.encode(GOLDEN_PROMPT)
        golden = record_golden(engine, prompt_ids)
    except Exception as e:  # reported to the server, which fails its start-up with it
        message = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        outbox.send_bytes(pickle.dumps((FAILED, (message.splitlines() or [""])[0])))
        return
    finally:
        monitoring.unregister_event_listener(on_event)
    info = CoreInfo(
        prompt_ids,
        golden,
        engine.config.max_model_len,
        num,
        seconds,
        engine.async_scheduling,
        len(cache_hits),
    )
    outbox.send_bytes(pickle.dumps((READY, info)))
    EngineCore(engine, options, inbox, outbox).run()


class EngineCore:
    """The engine process's loop: run what came in, step, send the step's events."""

    def __init__(
        self, engine: LLMEngine, options: CoreOptions, inbox: Connection, outbox: Connection
    ) -> None:
        self.engine = engine
        self.inbox, self.outbox = inbox, outbox
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
        # One poll object for the loop's checks: Connection.poll builds a selector per call
        # (about 8 µs; this, under 1), and the loop checks at least once a step.
        self._poller = select.poll()
        self._poller.register(inbox.fileno(), select.POLLIN)

    def run(self) -> None:
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
                    self._send((BEAT,))
            for request_id, request in engine.requests.items():
                if not request.is_finished:
                    engine.abort(request_id, "abort")
            while engine.has_unfinished:
                self._deliver(engine.step())
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception:  # a bug or a device failure: the server sees the process end
            log.exception("the engine process failed")
            raise

    # -- in ---------------------------------------------------------------------------

    def _receive(self, wait: bool) -> bool:
        """Handle every message waiting (the first up to HEARTBEAT_S away when ``wait``);
        False once the server's end is closed."""
        timeout = HEARTBEAT_S if wait else 0.0
        while self._readable(timeout):
            timeout = 0.0
            if self._take() is None:
                return False
        return True

    def _readable(self, timeout_s: float) -> bool:
        """Whether a message (or the end of the server's side) waits, within ``timeout_s``
        (rounded up to whole milliseconds, as Connection.poll does)."""
        return bool(self._poller.poll(math.ceil(timeout_s * 1000)))

    def _take(self) -> str | None:
        """Read and handle the message waiting: its kind, or None once the server's end is
        closed."""
        try:
            message = pickle.loads(self.inbox.recv_bytes())
        except EOFError:
            return None
        self._handle(message)
        return message[0]

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
            if not self._readable(min(left, POLL_S)):
                continue
            kind = self._take()
            if kind is None:
                return False
            adds += kind == ADD
        return True

    def _handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == ADD:
            _, seq, prompt_ids, sampling, tenant, priority, cache_salt = message
            self._reply(seq, self._add, prompt_ids, sampling, tenant, priority, cache_salt)
        elif kind == ABORT:
            request_id, reason = message[1], message[2] if len(message) > 2 else "abort"
            self.live.discard(request_id)
            self.interval.drop(request_id)
            request = self.engine.requests.get(request_id)
            if request is not None and not request.is_finished:
                self.engine.abort(request_id, reason)
        elif kind == CALL:
            _, seq, fn, args = message
            self._reply(seq, fn, self.engine, *args)
        elif kind == METRICS:
            self._reply(message[1], self._render_metrics)
            self._send_totals()  # never below what a scraper has just read
        elif kind == STOP:
            self.stopping = True

    def _reply(self, seq: int, fn, *args) -> None:
        try:
            value, ok = fn(*args), True
        except Exception as e:  # the caller's error (bad input), not the loop's
            value, ok = _portable(e), False
        try:
            self._send((REPLY, seq, ok, value))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            self._send((REPLY, seq, False, TypeError(f"the reply cannot be pickled: {e}")))

    def _add(self, prompt_ids, sampling, tenant, priority, cache_salt) -> str:
        request_id = add_admitted(
            self.engine,
            prompt_ids,
            sampling,
            tenant=tenant,
            priority=priority,
            cache_salt=cache_salt,
        )
        self.live.add(request_id)
        return request_id

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
            self._send((STEP, [encode_event(e) for e in out]))
        self.metrics.observe(engine, events)  # after the send: the server reads meanwhile
        while len(self.finished) > self.keep_finished:
            engine.forget(self.finished.popleft())  # its last event went out: done with it
        if len(engine.step_records) >= 2 * self.keep_step_records:
            engine.trim_step_records(self.keep_step_records)
        return finished

    def _send_totals(self) -> None:
        self._send((TOTALS, self.metrics.totals()))
        self.totals_sent = time.monotonic()
        self.steps_at_totals = self.engine.num_steps

    def _send(self, message: tuple) -> None:
        self.outbox.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        self.last_sent = time.monotonic()


def encode_event(event: Event) -> tuple:
    """An event as a tuple of its fields: a token event's second field is its token id (an
    int), a finish's and a rejection's their reason (a str); a finish has three fields."""
    if isinstance(event, TokenEvent):
        return (event.request_id, event.token_id, event.index, event.time_s, event.logprob)
    if isinstance(event, FinishEvent):
        return (event.request_id, event.reason, event.time_s)
    return (event.request_id, event.reason, event.time_s, event.kind, event.retry_after_s)


def decode_event(fields: tuple) -> Event:
    """``encode_event``'s inverse."""
    if not isinstance(fields[1], str):
        return TokenEvent(*fields)
    if len(fields) == 3:
        return FinishEvent(*fields)
    return RejectEvent(*fields)


def _portable(error: Exception) -> Exception:
    """``error`` if it survives pickling whole, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error
