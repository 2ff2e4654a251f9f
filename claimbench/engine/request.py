"""A request's host-side state: tokens, progress, block table and timestamps.

Progress is one counter, ``num_computed_tokens``: how many of the request's tokens
(prompt, then outputs) already have their K/V in the cache. A step schedules the next
tokens from there; once every token is computed the step samples a new one. A
preemption frees the pages and resets the counter, so the request recomputes its
prompt and outputs so far (recompute, as vLLM does) and then carries on.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from claimbench.engine.outputs import RejectEvent
from claimbench.engine.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued (new, or preempted and back in line)
    RUNNING = "running"  # holds pages and is scheduled every step
    FINISHED = "finished"  # stopped, hit a limit, or aborted
    REJECTED = "rejected"  # refused at admission; never scheduled


class Request:
    """One generation request. Times are ``time.perf_counter()`` seconds."""

    def __init__(
        self,
        request_id: str,
        seq_no: int,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        *,
        seed: int,
        tenant: str,
        priority: int,
        arrival_time: float,
        cache_salt: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.seq_no = seq_no  # submission order, breaks ties between equal arrival times
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.sampling = sampling
        self.seed = seed  # resolved: the request's own seed or one derived from the engine's
        self.tenant = tenant
        self.priority = priority
        self.arrival_time = arrival_time
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.block_table: list[int] = []  # page ids, in token order
        # Draft tokens proposed to follow the outputs, verified by the next step; never part
        # of output_token_ids (nor of a prefix-cache block) until accepted.
        self.spec_token_ids: list[int] = []
        self.num_preemptions = 0
        self.cache_salt = cache_salt  # prefix-cache salt of "salted" mode; None shares
        self.prefix_hit_tokens = 0  # prompt tokens served from the prefix cache at admission
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.token_times: list[float] = []  # one per output token
        self.finish_time: float | None = None
        self.finish_reason: str | None = None  # stop | length | abort | rejected
        self.rejected_reason: str | None = None
        self.rejection: RejectEvent | None = None  # the event it was refused with
        self.output_logprobs: list[float] = []
        # log p(prompt[i] | prompt[:i]) at index i - 1; filled chunk by chunk.
        self.prompt_logprobs: list[float | None] = [None] * max(len(prompt_token_ids) - 1, 0)
        # argmax of p(. | prompt[:i]) at index i - 1, beside the log-prob (top-1 agreement).
        self.prompt_top1: list[int | None] = [None] * max(len(prompt_token_ids) - 1, 0)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def max_total_tokens(self) -> int:
        """Prompt plus the most output it may produce (the admission bound)."""
        return self.num_prompt_tokens + self.sampling.max_tokens

    @property
    def is_finished(self) -> bool:
        return self.status in (RequestStatus.FINISHED, RequestStatus.REJECTED)

    def token_ids(self, start: int, end: int) -> list[int]:
        """Tokens [start, end) of prompt + outputs, without concatenating the whole lists."""
        num_prompt = len(self.prompt_token_ids)
        if end <= num_prompt:
            return self.prompt_token_ids[start:end]
        if start >= num_prompt:
            return self.output_token_ids[start - num_prompt : end - num_prompt]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - num_prompt]

    def append_outputs(
        self,
        token_ids: list[int],
        logprobs: list[float],
        now: float,
        eos_token_ids: Collection[int],
    ) -> str | None:
        """Append a step's accepted tokens one by one, stopping at the first that ends the
        request (EOS, a stop id, max_tokens): the tokens after it are dropped. Returns the
        stop reason, or None if the request goes on."""
        for token_id, logprob in zip(token_ids, logprobs, strict=True):
            self.append_output(token_id, logprob, now)
            reason = self.stop_reason(eos_token_ids)
            if reason is not None:
                return reason
        return None

    def append_output(self, token_id: int, logprob: float, now: float) -> None:
        self.output_token_ids.append(token_id)
        self.token_times.append(now)
        if self.first_token_time is None:
            self.first_token_time = now
        if self.sampling.logprobs:
            self.output_logprobs.append(logprob)

    def stop_reason(self, eos_token_ids: Collection[int]) -> str | None:
        """ "stop" or "length" once the last output ends the request, else None: any of the
        checkpoint's ``eos_token_ids`` stops it unless the request ignores EOS."""
        last = self.output_token_ids[-1]
        if last in self.sampling.stop_token_ids:
            return "stop"
        if not self.sampling.ignore_eos and last in eos_token_ids:
            return "stop"
        if self.num_output_tokens >= self.sampling.max_tokens:
            return "length"
        return None
