"""Asynchronous scheduling: the host schedules and builds step N+1 while step N runs.

JAX dispatch returns before the device finishes, so a step's host work (scheduling, batch
building, reading the outputs, stop checks, events) can hide behind the device's work on the
step before. One ``LLMEngine.step()`` call under overlap:

1. advance the in-flight step N's requests as if each sampled one token: a placeholder
   output token (``PLACEHOLDER``) stands for the token N is still computing, so the
   scheduler sees the state N will leave (a decode sequence needs its next token's page);
2. schedule and build N+1; a placeholder input token is taken from N's sampled tokens on
   the device (worker/token_merge.py), never read back to the host first;
3. dispatch N+1, so the device has it queued before N ends;
4. block on N, replace each placeholder by its token, run the stop checks, emit events
   (finishing through update.py's ``StepUpdater``, as the synchronous step does).

The host reads each token one step late. A sequence that stops in N (EOS, a stop token) or
is aborted before N's outputs are read has already been scheduled into N+1: the token N+1
computes for it is discarded, never emitted (``StepRecord.num_discarded``). One that N ends
by length is known in advance and is left out of N+1 (``parked``), as vLLM does.

Falls back to the synchronous path: an engine with speculative decoding (drafts need the
accepted tokens on the host before the next step is built) never overlaps; a step that asks
for prompt log-probs is completed within its own call (the next step is built after it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import jax
import numpy as np

from claimbench.engine.config import EngineConfig
from claimbench.engine.outputs import Event, TokenEvent
from claimbench.engine.request import Request
from claimbench.engine.sched.scheduler import Scheduler
from claimbench.engine.sched.update import FinishedStep, StepUpdater
from claimbench.engine.worker.batch import StepInputError, StepPlan, build_step, empty_inputs
from claimbench.engine.worker.buckets import bucket_pairs, pick_pair, seq_buckets, token_buckets
from claimbench.engine.worker.runner import ModelRunner, StepOutput
from claimbench.engine.worker.token_merge import merge_token_ids

PLACEHOLDER = -1  # an output token still being computed on the device


@dataclass
class InFlight:
    """A dispatched step whose outputs the host has not read yet."""

    plan: StepPlan
    out: StepOutput  # device arrays
    t0: float  # when its scheduling began
    dispatched: float  # when it was handed to the device
    host_s: float  # host work so far (scheduling, building, dispatch)
    num_preempted: int
    ladder_rung: int  # the degradation-ladder rung it was scheduled under
    # Per slot: whether the slot samples a request's next token (a placeholder stands for it
    # once advanced); False for a mid-prefill chunk or a request that finished first.
    samples: list[bool] = field(default_factory=list)


def advance(step: InFlight) -> None:
    """Move each of the step's live requests past its scheduled tokens, appending a
    placeholder for the token the step samples. Finished (or aborted) requests stay put."""
    step.samples = []
    for request, n in zip(step.plan.requests, step.plan.num_tokens, strict=True):
        if request.is_finished:
            step.samples.append(False)
            continue
        request.num_computed_tokens += n
        sampled = request.num_uncomputed_tokens == 0
        if sampled:
            request.output_token_ids.append(PLACEHOLDER)
        step.samples.append(sampled)


@contextmanager
def parked(scheduler: Scheduler, step: InFlight | None) -> Iterator[None]:
    """Keep out of the scheduler's running list, while the next step is scheduled, every
    request whose placeholder is its last allowed token: the in-flight step ends it by length,
    and the synchronous scheduler would no longer see it."""
    done = []
    if step is not None:
        done = [
            r
            for r, s in zip(step.plan.requests, step.samples, strict=True)
            if s and r.num_output_tokens >= r.sampling.max_tokens
        ]
    if not done:
        yield
        return
    running = scheduler.running
    before = list(running)
    out = {id(r) for r in done}
    running[:] = [r for r in before if id(r) not in out]
    try:
        yield
    finally:
        # Put them back where they were (orderings may read list order), keep the newly
        # admitted, and drop the preempted.
        now = {id(r) for r in running}
        known = {id(r) for r in before}
        added = [r for r in running if id(r) not in known]
        running[:] = [r for r in before if id(r) in out or id(r) in now] + added


def token_sources(plan: StepPlan, prev: InFlight | None) -> np.ndarray | None:
    """i32[T]: for each input token that is a placeholder, the previous step's slot that
    samples it (-1 elsewhere); None when there is none. A placeholder is always a decode
    slot's single token, and decode slots come first, one token each."""
    if prev is None:
        return None
    pairs = zip(prev.plan.requests, prev.samples, strict=True)
    slots = {id(r): i for i, (r, s) in enumerate(pairs) if s}
    src = np.full(plan.token_bucket, -1, np.int32)
    for i, request in enumerate(plan.requests[: plan.num_decode]):
        src[i] = slots.get(id(request), -1)
    if (plan.inputs.token_ids[src < 0] == PLACEHOLDER).any():
        raise RuntimeError("a placeholder token has no source in the previous step")
    return src if (src >= 0).any() else None


def fill(
    request: Request, token: int, logprob: float, now: float, eos: frozenset[int]
) -> str | None:
    """Replace the request's placeholder (its last output) by the sampled token; the stop
    reason it brings, or None."""
    if request.output_token_ids[-1] != PLACEHOLDER:
        raise RuntimeError(f"request {request.request_id} has no placeholder to fill")
    request.output_token_ids.pop()
    request.append_output(token, logprob, now)
    return request.stop_reason(eos)


class OverlapStepper:
    """Runs ``LLMEngine.step()`` with the next step dispatched before the current one's
    outputs are read. Holds at most one step in flight between calls."""

    def __init__(
        self,
        config: EngineConfig,
        runner: ModelRunner,
        scheduler: Scheduler,
        updater: StepUpdater,
    ) -> None:
        self.config = config
        self.runner = runner
        self.scheduler = scheduler
        self.updater = updater
        self.inflight: InFlight | None = None
        self.last_ready = 0.0  # when the last step's outputs were seen ready

    def precompile(self, prompt_logprobs: bool = False) -> tuple[int, float]:
        """Compile the token merge at every (token bucket, previous step's sequence bucket),
        so serving with overlap never compiles: (variants compiled now, seconds). The previous
        tokens come from real all-padding steps, so they are placed as a step's outputs are."""
        cfg, runner = self.config, self.runner
        start, before = time.perf_counter(), merge_token_ids._cache_size()
        steps_before = runner.num_compilations
        for num_seqs in seq_buckets(cfg):
            num_tokens = pick_pair(cfg, num_seqs, num_seqs)[0]
            prev = runner.execute(empty_inputs(cfg, num_tokens, num_seqs), False).tokens
            # Any token bucket may follow: most of a large batch can finish in one step.
            for bucket in token_buckets(cfg):
                src = np.full(bucket, -1, np.int32)
                jax.block_until_ready(merge_token_ids(np.zeros(bucket, np.int32), src, prev))
        # A step whose ids were merged on the device takes them as a jax.Array: compile
        # every bucket pair that way too (the merge's source is all -1: ids unchanged).
        # Steps asking for prompt log-probs complete within their call, but their ids can be
        # merged all the same: with ``prompt_logprobs``, that variant too.
        for num_tokens, num_seqs in bucket_pairs(cfg):
            inputs = empty_inputs(cfg, num_tokens, num_seqs)
            src = np.full(num_tokens, -1, np.int32)
            merged = merge_token_ids(inputs.token_ids, src, prev)
            merged_inputs = dataclasses.replace(inputs, token_ids=merged)
            for flag in (False, True) if prompt_logprobs else (False,):
                jax.block_until_ready(runner.execute(merged_inputs, flag))
        num = merge_token_ids._cache_size() - before + runner.num_compilations - steps_before
        return num, time.perf_counter() - start

    def step(self, events: list[Event]) -> list[FinishedStep]:
        """One overlapped step: dispatch the next step, then read the one in flight. Its
        events are appended to ``events``; returns the steps whose outputs were read (the
        previous one, and the new one when it asked for prompt log-probs), in order."""
        prev, self.inflight = self.inflight, None
        finished = []
        t0 = time.perf_counter()
        if prev is not None:
            advance(prev)
        with parked(self.scheduler, prev):
            scheduled = self.scheduler.schedule(t0)
        cur = plan = None
        if scheduled.scheduled:
            try:
                plan = build_step(self.config, scheduled.scheduled)
            except StepInputError as e:  # the step in flight still completes below
                self.updater.fail(scheduled, e, events)
        if plan is not None:
            inputs = plan.inputs
            src = token_sources(plan, prev)
            if src is not None:
                merged = merge_token_ids(inputs.token_ids, src, prev.out.tokens)
                inputs = dataclasses.replace(inputs, token_ids=merged)
            dispatched = time.perf_counter()
            out = self.runner.execute(inputs, plan.wants_prompt_logprobs)
            host_s = time.perf_counter() - t0
            rung = self.scheduler.ladder.rung
            cur = InFlight(plan, out, t0, dispatched, host_s, len(scheduled.preempted), rung)
        if prev is not None:
            finished.append(self._complete(prev, events))
        if cur is not None:
            if cur.plan.wants_prompt_logprobs:
                # Prompt log-probs are filled by the synchronous update.
                finished.append(self._complete_sync(cur, events))
            else:
                self.inflight = cur
        return finished

    def _wait(self, step: InFlight) -> tuple[float, float, float]:
        """Block on the step's outputs: (ready time, seconds blocked, device seconds). Device
        seconds run from when the device could start it (its dispatch, or the step before
        it finishing) until it was seen ready; exact when the host had to wait, an upper
        bound when the outputs were already there."""
        start = time.perf_counter()
        jax.block_until_ready(step.out)
        ready = time.perf_counter()
        device_s = ready - max(step.dispatched, self.last_ready)
        self.last_ready = ready
        return ready, ready - start, device_s

    def _complete(self, step: InFlight, events: list[Event]) -> FinishedStep:
        ready, blocked, device_s = self._wait(step)
        tokens = np.asarray(step.out.tokens)[:, 0].tolist()
        logprobs = np.asarray(step.out.logprobs)[:, 0].tolist()
        num_discarded = 0
        for i, request in enumerate(step.plan.requests):
            if request.is_finished:
                # Stopped or aborted after this step was built: its token is dropped.
                num_discarded += 1
                continue
            if not step.samples[i]:
                continue
            reason = fill(request, tokens[i], logprobs[i], ready, self.updater.stop_token_ids)
            index = request.num_output_tokens - 1
            lp = request.output_logprobs[index] if request.sampling.logprobs else None
            events.append(TokenEvent(request.request_id, tokens[i], index, ready, lp))
            if reason is not None:
                self.updater.finish(request, reason, ready, events)
        host_s = step.host_s + time.perf_counter() - ready
        pool = self.scheduler.block_manager
        return FinishedStep(
            step.plan,
            step.out,
            [0] * len(step.plan.requests),
            step.num_preempted,
            step.t0,
            host_s,
            device_s,
            pool.num_used_pages,
            pool.num_free_pages,
            step.ladder_rung,
            host_blocked_s=blocked,
            overlapped=True,
            num_discarded=num_discarded,
        )

    def _complete_sync(self, step: InFlight, events: list[Event]) -> FinishedStep:
        ready, blocked, device_s = self._wait(step)
        accepted = self.updater.update_from_output(step.plan, step.out, ready, events)
        host_s = step.host_s + time.perf_counter() - ready
        pool = self.scheduler.block_manager
        return FinishedStep(
            step.plan,
            step.out,
            accepted,
            step.num_preempted,
            step.t0,
            host_s,
            device_s,
            pool.num_used_pages,
            pool.num_free_pages,
            step.ladder_rung,
            host_blocked_s=blocked,
        )
