"""What the engine hands back: per-step events and per-request outputs."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class TokenEvent:
    request_id: str
    token_id: int
    index: int  # position in the request's output
    time_s: float  # time.perf_counter() when the token was ready on the host
    logprob: float | None  # when the request asked for logprobs


@dataclass(frozen=True)
class FinishEvent:
    request_id: str
    reason: str  # stop | length | abort | timeout
    time_s: float


class RejectKind(StrEnum):
    """Why a request was turned away at admission."""

    INVALID = "invalid"  # never servable: bad tokens, too long for the model, pool or tenant limits
    OVER_LIMIT = "over_limit"  # its tenant's ingress limits refused it now; a retry may pass


@dataclass(frozen=True)
class RejectEvent:
    request_id: str
    reason: str  # why, in words, with the numbers
    time_s: float
    kind: RejectKind = RejectKind.INVALID
    # OVER_LIMIT only: seconds until the tenant's token bucket holds the request again (a
    # server's Retry-After); None when no bucket refused it or no wait would make it fit.
    retry_after_s: float | None = None


Event = TokenEvent | FinishEvent | RejectEvent


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str | None  # decoded output when the engine has a tokenizer
    finish_reason: str | None  # stop | length | abort | timeout | rejected
    rejected_reason: str | None
    logprobs: list[float] | None  # per output token, when asked for
    prompt_logprobs: list[float] | None  # log p(prompt[i] | prompt[:i]) for i = 1..n-1
    prompt_top1: list[int] | None  # argmax p(. | prompt[:i]) for i = 1..n-1, with prompt_logprobs


@dataclass(frozen=True)
class RunResult:
    request_ids: list[str]  # in workload order
    duration_s: float  # wall time from the first possible arrival to the last event
    timed_out: bool  # unfinished requests were aborted at the timeout
