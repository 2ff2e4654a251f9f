"""The step's end on the scheduler side: schedule() -> execute -> update_from_output().

``StepUpdater.update_from_output`` reads a finished step's outputs back into its requests
(computed tokens, accepted tokens, prompt log-probs), reports them as events and finishes the
requests that stop; ``finish`` ends a request for any reason (a stop, an abort, an error),
freeing its pages and its drafts. ``FinishedStep`` is what a step hands its record: the plan
and outputs as run, its timings and the pool as it was when the outputs were read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from claimbench.engine.outputs import Event, FinishEvent, TokenEvent
from claimbench.engine.request import Request, RequestStatus
from claimbench.engine.sched.scheduler import Scheduler, SchedulerOutput
from claimbench.engine.spec.speculator import Speculator
from claimbench.engine.worker.batch import StepInputError, StepPlan
from claimbench.engine.worker.runner import StepOutput


@dataclass(frozen=True)
class FinishedStep:
    """A step whose outputs were read, with what its StepRecord needs."""

    plan: StepPlan
    out: StepOutput  # ready on the device
    accepted: list[int]  # draft tokens accepted per slot
    num_preempted: int
    t0: float  # when its scheduling began (perf_counter)
    host_s: float  # host seconds: scheduling, building, reading the outputs
    device_s: float
    pages_used: int  # the pool when the step was recorded
    pages_free: int
    ladder_rung: int  # the degradation-ladder rung it was scheduled under
    draft_s: float = 0.0  # proposing the next step's drafts
    host_blocked_s: float = 0.0  # the host's wait for the outputs
    overlapped: bool = False  # ran under async scheduling
    num_discarded: int = 0  # tokens dropped: their requests ended before they were read


class StepUpdater:
    """Advances requests from a step's outputs and finishes them: the scheduler side of a
    step's end, shared by the synchronous step and the overlapped one (async_sched.py)."""

    def __init__(
        self,
        scheduler: Scheduler,
        speculator: Speculator | None,
        stop_token_ids: frozenset[int],
        trim_rejected_drafts: bool,
    ) -> None:
        """``stop_token_ids``: the checkpoint's; ``trim_rejected_drafts``: give back the
        pages of rejected drafts at once (a paged pool)."""
        self.scheduler = scheduler
        self.speculator = speculator
        self.stop_token_ids = stop_token_ids
        self.trim_rejected_drafts = trim_rejected_drafts

    def finish(self, request: Request, reason: str, now: float, events: list[Event]) -> None:
        """End an unfinished request at ``now`` with ``reason``: the scheduler frees its pages
        (and the speculator its drafts), and its FinishEvent is appended to ``events``."""
        self.scheduler.finish(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        request.finish_time = now
        if self.speculator is not None:
            self.speculator.free(request)
        events.append(FinishEvent(request.request_id, reason, now))

    def fail(self, scheduled: SchedulerOutput, error: StepInputError, events: list[Event]) -> None:
        """End the scheduled requests ``error`` names, whose own values kept the step from
        being built, with reason "error"; nothing else is touched (the others run next step),
        so one request's data never ends the engine for every other."""
        now = time.perf_counter()
        by_id = {request.request_id: request for request, _ in scheduled.scheduled}
        for request_id in error.request_ids:
            request = by_id[request_id]
            if not request.is_finished:
                self.finish(request, "error", now, events)

    def update_from_output(
        self, plan: StepPlan, out: StepOutput, now: float, events: list[Event]
    ) -> list[int]:
        """Read a finished step's outputs (``out``, ready on the device) at ``now``: advance
        each request, append its accepted tokens, report them in ``events`` and finish the
        requests that stop. Requests that ended before the outputs were read are skipped.
        Returns each slot's accepted draft tokens."""
        tokens = np.asarray(out.tokens).tolist()
        logprobs = np.asarray(out.logprobs).tolist()
        accepted = np.asarray(out.num_accepted)[: len(plan.requests)].tolist()
        prompt_logprobs = prompt_top1 = None
        if plan.wants_prompt_logprobs:
            prompt_logprobs = np.asarray(out.prompt_logprobs).tolist()
            prompt_top1 = np.asarray(out.prompt_top1).tolist()
        offset = 0
        for i, (request, n) in enumerate(zip(plan.requests, plan.num_tokens, strict=True)):
            if request.is_finished:
                # Ended before this step's outputs were read (async_sched.py): dropped.
                offset += n
                continue
            start = request.num_computed_tokens
            if prompt_logprobs is not None and request.sampling.prompt_logprobs:
                # Position p predicts prompt token p + 1, stored at index p.
                stop = min(start + n, request.num_prompt_tokens - 1)
                for p in range(start, stop):
                    request.prompt_logprobs[p] = prompt_logprobs[offset + p - start]
                    request.prompt_top1[p] = prompt_top1[offset + p - start]
            offset += n
            num_draft = plan.num_draft[i]
            request.num_computed_tokens += n - num_draft
            if request.num_uncomputed_tokens:
                continue  # mid-prefill: the sampled token is not the next one
            # The step's own token and the accepted drafts, each checked for a stop.
            emitted = accepted[i] + 1
            first = request.num_output_tokens
            reason = request.append_outputs(
                tokens[i][:emitted], logprobs[i][:emitted], now, self.stop_token_ids
            )
            # Verified K/V: every token but the last emitted one (the next step writes it).
            request.num_computed_tokens = request.num_tokens - 1
            for index in range(first, request.num_output_tokens):
                lp = request.output_logprobs[index] if request.sampling.logprobs else None
                token = request.output_token_ids[index]
                events.append(TokenEvent(request.request_id, token, index, now, lp))
            self.scheduler.charge_accepted(request, request.num_output_tokens - first - 1)
            if reason is not None:
                self.finish(request, reason, now, events)
            elif num_draft and self.trim_rejected_drafts:
                # Rejected drafts' pages: keep only what the next step writes into.
                self.scheduler.block_manager.trim(request, request.num_tokens)
        return accepted
