"""The messages between the server and its engine loop, one type per operation.

The server's side (engine_client.py) and the engine's (engine_core.py) exchange only
these, pickled over a pipe when the engine runs in its own process, handed over as they
are when it runs on a thread of the server's process: both paths speak one protocol.
Every request that gets an answer carries a ``seq``, and its answer is a ``Reply`` with
the same one. Messages are frozen dataclasses with slots, so a step's message costs one
small object on top of its events, which travel as plain tuples (``encode_event``: a
third of a dataclass's pickling time, paid on the engine's own loop).

To the engine: ``AddRequest``, ``AbortRequest``, ``SnapshotRequest``, ``MetricsRequest``,
``ResetRequest``, ``DiagnosticRequest``, ``StopRequest``. From it: ``Ready`` (or ``Failed``)
once, then ``Reply`` for each request with a seq, ``StepEvents`` with every event of one
engine step, ``Totals`` (metric_totals.py) and ``Beat`` when nothing else went out for a
while.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from claimbench.engine.config import EngineConfig
from claimbench.engine.outputs import Event, FinishEvent, RejectEvent, RejectKind, TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.monitoring.metric_totals import MetricTotals

# Step records a server keeps (the newest): enough for /metrics-style looks back, bounded so
# a server that runs for weeks does not grow. Trimmed in batches of as many again.
KEEP_STEP_RECORDS = 10_000
# Finished requests a server keeps (the newest), for a look at what just ran; older ones are
# forgotten by the engine once their events were delivered.
KEEP_FINISHED_REQUESTS = 1024


# -- start-up ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CoreOptions:
    """What the engine loop is started with (pickled to the engine process)."""

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
    """What the engine loop reports once it is ready to serve."""

    golden_prompt_ids: list[int]
    golden_tokens: list[int]
    max_model_len: int
    num_compiled: int  # step shapes compiled before serving (0 without precompile)
    compile_s: float
    async_scheduling: bool  # steps overlap; the loop then waits for replacements meanwhile
    num_cache_hits: int = 0  # programs loaded from the persistent compilation cache


# -- to the engine ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddRequest:
    """Admit a request; the reply is its id (or RequestRejected, or ValueError)."""

    seq: int
    prompt_token_ids: list[int]
    sampling: SamplingParams
    tenant: str
    priority: int
    cache_salt: str | None


@dataclass(frozen=True, slots=True)
class AbortRequest:
    """Stop a request and free its pages; no reply, and no more of its events."""

    request_id: str
    reason: str = "abort"  # what /metrics counts it as ("stop" when a stop string ended it)


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """The reply is the engine's EngineSnapshot (monitoring/snapshot.py)."""

    seq: int


@dataclass(frozen=True, slots=True)
class MetricsRequest:
    """The reply is /metrics' text; Totals follow it."""

    seq: int


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """Empty the engine (``LLMEngine.reset``) between runs of a harness; nothing may be in
    flight (ValueError otherwise)."""

    seq: int


@dataclass(frozen=True, slots=True)
class DiagnosticRequest:
    """Run the named diagnostic (diagnostics.py: a read of the engine's state, or a fault
    injected) where the engine lives; the reply is its result. For tests and probes: the
    server's routes send only the other requests."""

    seq: int
    name: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class StopRequest:
    """Abort whatever is in flight, deliver its events and end the loop."""


# -- from the engine --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    info: CoreInfo


@dataclass(frozen=True, slots=True)
class Failed:
    """The engine could not start; ``message`` is one line."""

    message: str


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to the request with ``seq``: its value, or (``ok`` False) its error."""

    seq: int
    ok: bool
    value: Any


@dataclass(frozen=True, slots=True)
class StepEvents:
    """Every event of one engine step for requests the server still wants, encoded."""

    events: list[tuple]


@dataclass(frozen=True, slots=True)
class Totals:
    totals: MetricTotals


@dataclass(frozen=True, slots=True)
class Beat:
    """The loop is alive (sent when nothing else went out for a while)."""


ToEngine = (
    AddRequest
    | AbortRequest
    | SnapshotRequest
    | MetricsRequest
    | ResetRequest
    | DiagnosticRequest
    | StopRequest
)
FromEngine = Ready | Failed | Reply | StepEvents | Totals | Beat


# -- errors that cross ------------------------------------------------------------------


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


class EngineStopped(Exception):
    """The engine loop has stopped (shut down or failed); no request can be served."""


class RequestFailed(Exception):
    """The engine could not run this request's own values (its finish reason "error");
    every other request goes on."""


# -- events -----------------------------------------------------------------------------


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
