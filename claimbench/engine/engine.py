"""LLMEngine: requests in, timestamped events out; each step is schedule -> execute -> update.

The step's parts live beside what they serve: the scheduler picks the work (sched/
scheduler.py), the runner executes it (worker/runner.py), and the scheduler side reads the
outputs back, checks stops and finishes requests (sched/update.py); overlapped stepping is
sched/async_sched.py."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Sequence

import jax
import numpy as np
import pandas as pd

from claimbench.engine.config import HOST_FIELDS, EngineConfig
from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.kv.kv_cache import resolve_kv_dtype
from claimbench.engine.metrics import StepRecord, requests_frame, steps_frame
from claimbench.engine.outputs import Event, RejectEvent, RejectKind, RequestOutput
from claimbench.engine.request import Request, RequestStatus
from claimbench.engine.request_checks import (
    check_arrival_time,
    check_id,
    check_request,
    invalid_tokens,
)
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.sched.async_sched import OverlapStepper
from claimbench.engine.sched.scheduler import Scheduler
from claimbench.engine.sched.update import FinishedStep, StepUpdater
from claimbench.engine.spec.draft_model import check_draft
from claimbench.engine.spec.speculator import Speculator
from claimbench.engine.stats import EngineStats, engine_stats
from claimbench.engine.worker.batch import StepInputError, build_step
from claimbench.engine.worker.runner import ModelRunner
from claimbench.kernels.kv_quant import FP8_DTYPE
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.quantize import weight_format
from claimbench.models.tokenizer import Tokenizer


class LLMEngine:
    """A continuous-batching engine over one model and one paged KV pool.

    It serves parts made elsewhere: ``engine.build.build_engine(config)`` loads the model
    and tokenizer, quantizes the weights, calibrates fp8 KV scales and loads a draft.

    Batch invariance: in float32 a request's greedy tokens do not depend on what shares its
    batch. In bfloat16 (the default on accelerators) they can: a near-tie between two tokens
    (a logit gap of 0.007 was seen, with two requests) may flip with the batch's composition,
    because reductions over a differently padded batch round differently. vLLM documents the
    same. Tests of invariance therefore run in float32.
    """

    def __init__(
        self,
        config: EngineConfig,
        model: LlamaForCausalLM,
        tokenizer: Tokenizer | None = None,
        *,
        draft_model: LlamaForCausalLM | None = None,
        fp8_kv_scales: tuple[float, float] | None = None,
        unsharded: bool = False,
    ) -> None:
        """``model`` must already hold ``config.weights``; ``fp8_kv_scales`` are an fp8
        cache's (k, v) scales (None: ``config.kv_scale`` for both, which must then be a
        number); ``draft_model`` proposes when ``config.speculative`` is "draft";
        ``unsharded`` places the model with no mesh (``ModelRunner``). ValueError for parts
        that cannot serve ``config``."""
        held = weight_format(model)
        if held != config.model.weights:
            raise ValueError(
                f"model holds {held} weights but config.weights={config.model.weights!r} "
                "(build_engine quantizes)"
            )
        max_model_len = config.scheduler.max_model_len
        if max_model_len > model.cfg.max_position_embeddings:
            raise ValueError(
                f"max_model_len={max_model_len} exceeds the model's "
                f"max_position_embeddings={model.cfg.max_position_embeddings}"
            )
        if config.model.early_exit_threshold is not None and not hasattr(model, "exit_heads"):
            raise ValueError("early_exit_threshold needs a model with exit heads (build_engine)")
        speculative = config.spec.speculative
        if speculative == "draft" and draft_model is None:
            raise ValueError('speculative="draft" needs a draft_model (build_engine loads it)')
        if unsharded and config.parallel.tp != 1:
            raise ValueError(
                f"unsharded places the model on one device, but tp={config.parallel.tp}"
            )
        if draft_model is not None:
            check_draft(draft_model.cfg, model.cfg, None, None)
        if fp8_kv_scales is None:
            fp8_kv_scales = (1.0, 1.0)
            kv_scale = config.cache.kv_scale
            if resolve_kv_dtype(config.cache.kv_dtype, model.dtype) == FP8_DTYPE:
                if kv_scale == "calibrate":
                    raise ValueError('kv_scale="calibrate" needs fp8_kv_scales (build_engine)')
                fp8_kv_scales = (float(kv_scale), float(kv_scale))
        self.config = config
        self.model_cfg = model.cfg
        self.tokenizer = tokenizer
        self.stop_token_ids = frozenset(model.cfg.stop_token_ids)  # the checkpoint's
        self.fp8_kv_scales = fp8_kv_scales  # (k, v); used only by an fp8 cache
        self.runner = ModelRunner(config, model, fp8_kv_scales, unsharded=unsharded)
        self.speculator = None
        if speculative != "none":
            draft = draft_model if speculative == "draft" else None
            self.speculator = Speculator(config, draft)
        self.reset()

    def reset(self, config: EngineConfig | None = None) -> None:
        """Forget every request, record and cached prefix and start afresh, under ``config``
        if given. The compiled steps and the KV pool are kept, so ``config`` may differ only
        in config.HOST_FIELDS (policies, tenants, seed, prefix caching).

        The new block manager and scheduler are built before anything is swapped, so a config
        they reject (guaranteed pages above the pool, say) leaves the engine as it was."""
        if config is not None and not isinstance(config, EngineConfig):
            raise ValueError(f"config must be an EngineConfig or None, got {type(config)}")
        config = config or self.config
        now = self.config.flat()
        changed = [
            name
            for name, value in config.flat().items()
            if value != now[name] and name not in HOST_FIELDS
        ]
        if changed:
            raise ValueError(f"reset may change only {HOST_FIELDS}, not {changed}")
        cache = config.cache
        block_manager = BlockManager(self.runner.num_pages, cache.page_size, cache.prefix_caching)
        scheduler = Scheduler(config, block_manager)
        self.config, self.block_manager, self.scheduler = config, block_manager, scheduler
        if self.speculator is not None:
            self.speculator.reset()
        # Rejected drafts' pages go back at once only in a paged pool.
        trim = cache.kv_allocation == "paged"
        self.updater = StepUpdater(scheduler, self.speculator, self.stop_token_ids, trim)
        self.requests: dict[str, Request] = {}
        self.step_records: list[StepRecord] = []
        self._num_trimmed_steps = 0  # records dropped by trim_step_records
        self._pending: list[Event] = []  # rejections and aborts, reported by the next step
        self._seq_no = itertools.count()
        self.start_time = time.perf_counter()
        # A step still in flight from before is dropped with its requests.
        self._overlap = None
        if self.async_scheduling:
            self._overlap = OverlapStepper(config, self.runner, scheduler, self.updater)

    # -- requests -------------------------------------------------------------------------

    def add_request(
        self,
        prompt: str | Sequence[int],
        sampling: SamplingParams | None = None,
        tenant: str = "default",
        priority: int = 0,
        arrival_time: float | None = None,
        cache_salt: str | None = None,
    ) -> str:
        """Queue a request (text needs a tokenizer); returns its id. A request that can never
        be served, or that its tenant's limits refuse now, is rejected: ``rejection(id)`` has
        its RejectEvent at once, and the next ``step()`` reports it. ``cache_salt`` separates
        its prefix-cache blocks when ``prefix_caching="salted"``.

        Malformed arguments (wrong types, an empty tenant) raise ValueError before anything is
        registered or charged, so a caller's bad input leaves no state behind."""
        sampling = SamplingParams() if sampling is None else sampling
        token_ids = check_request(prompt, sampling, tenant, priority, cache_salt, self.tokenizer)
        arrival_time = check_arrival_time(arrival_time)
        seq_no = next(self._seq_no)
        now = time.perf_counter()
        seed = sampling.seed
        engine_seed = self.config.scheduler.seed
        if seed is None and engine_seed is None:
            seed = secrets.randbits(32)  # unpredictable: no tenant can infer another's traffic
        elif seed is None:
            seed = int(np.random.SeedSequence([engine_seed, seq_no]).generate_state(1)[0])
        request = Request(
            f"req-{seq_no}",
            seq_no,
            token_ids,
            sampling,
            seed=seed,
            tenant=tenant,
            priority=int(priority),
            arrival_time=now if arrival_time is None else arrival_time,
            cache_salt=cache_salt,
        )
        self.requests[request.request_id] = request
        # Ingress refusals (tenant limits, shedding) are the ones admission counts.
        num_refused = self.scheduler.admission.total_rejected
        vocab = self.model_cfg.vocab_size
        reason = invalid_tokens(token_ids, vocab) or self.scheduler.admit(request)
        if reason is None:
            self.scheduler.add(request)
        else:
            admission = self.scheduler.admission
            refused = admission.total_rejected > num_refused
            kind = RejectKind.OVER_LIMIT if refused else RejectKind.INVALID
            # Read now, beside the refusal: the bucket's level when the request was refused.
            wait = admission.retry_after_s(request) if refused else None
            event = RejectEvent(request.request_id, reason, now, kind, wait)
            request.status = RequestStatus.REJECTED
            request.rejected_reason = reason
            request.rejection = event
            request.finish_reason = "rejected"
            request.finish_time = now
            self._pending.append(event)
        return request.request_id

    def rejection(self, request_id: str) -> RejectEvent | None:
        """The RejectEvent a request was refused with at ``add_request`` (reason, kind and
        retry-after), or None if it was admitted: a server answers the caller at once with
        it. ValueError for an unknown (or forgotten) id."""
        request = self.requests.get(check_id(request_id))
        if request is None:
            raise ValueError(f"no request {request_id!r} in this engine")
        return request.rejection

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Stop a request now and free its pages (no-op if it already finished); its
        FinishEvent comes with the next ``step()``. ValueError for an unknown id or a reason
        that is not a non-empty string."""
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"abort reason must be a non-empty string, got {reason!r}")
        request = self.requests.get(check_id(request_id))
        if request is None:
            raise ValueError(f"no request {request_id!r} in this engine")
        if request.is_finished:
            return
        self.updater.finish(request, reason, time.perf_counter(), self._pending)

    def forget(self, request_id: str) -> None:
        """Drop a finished request whose events were delivered, so a long-running server's
        memory stays bounded (experiments keep theirs for requests_frame). ValueError for an
        unknown or unfinished request, or one with an event still to come."""
        request = self.requests.get(check_id(request_id))
        if request is None or not request.is_finished:
            raise ValueError(f"request {request_id!r} is not a finished request of this engine")
        if any(e.request_id == request_id for e in self._pending):
            raise ValueError(f"request {request_id!r} has events the next step() reports")
        del self.requests[request_id]

    def trim_step_records(self, keep: int) -> None:
        """Keep only the last ``keep`` step records (and the service history beside them):
        a server's bound on memory. Step numbers keep counting from the first step."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be an integer >= 0, got {keep!r}")
        num_dropped = len(self.step_records) - keep
        if num_dropped > 0:
            del self.step_records[:num_dropped]
            del self.scheduler.service.history[:num_dropped]
            self._num_trimmed_steps += num_dropped

    @property
    def num_steps(self) -> int:
        """Steps recorded so far, trimmed ones included (the next record's number)."""
        return self._num_trimmed_steps + len(self.step_records)

    @property
    def has_unfinished(self) -> bool:
        """Whether a ``step()`` has anything to do or report: requests in flight, or events
        (rejections, aborts) not yet delivered."""
        inflight = self._overlap is not None and self._overlap.inflight is not None
        return self.scheduler.has_unfinished or bool(self._pending) or inflight

    def step_in_flight(self) -> bool:
        """Whether a step dispatched by the last ``step()`` is still running on the device
        (async scheduling only): until it ends, the next ``step()`` call would only queue
        behind it, so requests added meanwhile lose nothing by waiting for it."""
        inflight = self._overlap.inflight if self._overlap is not None else None
        return inflight is not None and not inflight.out.tokens.is_ready()

    @property
    def async_scheduling(self) -> bool:
        """Whether steps overlap (config.async_scheduling, None resolved for the platform).
        Never with speculative decoding: a step's drafts need the accepted tokens on the host
        before it is built."""
        overlap = self.config.resolved_async_scheduling(jax.default_backend())
        return overlap and self.speculator is None

    def describe_steps(self) -> dict[str, object]:
        """How the engine steps: whether the host overlaps the device, and when it does not."""
        return {
            "async_scheduling": self.async_scheduling,
            # async_sched.py: steps asking for prompt log-probs complete within their call.
            "overlap_fallbacks": "speculative decoding; steps with prompt log-probs",
        }

    # -- the step -------------------------------------------------------------------------

    def step(self) -> list[Event]:
        """Schedule, run one batched forward pass, sample, and report what happened.

        Under async scheduling (sched/async_sched.py) the call dispatches the next step before it
        reads the current one's tokens: the events it returns are the previous step's."""
        events, self._pending = self._pending, []
        if self._overlap is not None:
            for finished in self._overlap.step(events):
                self._record(finished)
            return events
        t0 = time.perf_counter()
        scheduled = self.scheduler.schedule(t0)
        if not scheduled.scheduled:
            return events
        try:
            plan = build_step(self.config, scheduled.scheduled)
        except StepInputError as e:
            self.updater.fail(scheduled, e, events)  # the others run next step
            return events
        if self.speculator is not None:
            for request in scheduled.preempted:
                self.speculator.free(request)
        t1 = time.perf_counter()
        out = self.runner.execute(plan.inputs, plan.wants_prompt_logprobs)
        t_blocked = time.perf_counter()
        out = jax.block_until_ready(out)
        t2 = time.perf_counter()
        accepted = self.updater.update_from_output(plan, out, t2, events)
        t3 = time.perf_counter()
        if self.speculator is not None:
            self.speculator.propose(self.scheduler.speculating)
        t4 = time.perf_counter()
        finished = FinishedStep(
            plan,
            out,
            accepted,
            len(scheduled.preempted),
            t0,
            host_s=t3 - t0 - (t2 - t1),
            device_s=t2 - t1,
            pages_used=self.block_manager.num_used_pages,
            pages_free=self.block_manager.num_free_pages,
            ladder_rung=self.scheduler.ladder.rung,
            draft_s=t4 - t3,
            host_blocked_s=t2 - t_blocked,
        )
        self._record(finished)
        return events

    def _record(self, step: FinishedStep) -> None:
        """Append the StepRecord of a step whose outputs were read."""
        plan, accepted = step.plan, step.accepted
        experts_touched = tuple(np.asarray(step.out.experts_touched).tolist())
        exit_layers = np.asarray(step.out.exit_layers)[: plan.num_scheduled_tokens].tolist()
        drafted = [(d, a) for d, a in zip(plan.num_draft, accepted, strict=True) if d]
        # A verify chunk is decode work (one sequence's next tokens), though it runs with the
        # mixed group.
        num_decode_seqs = plan.num_decode + len(drafted)
        num_decode_tokens = plan.num_decode + sum(1 + d for d, _ in drafted)
        k = self.config.spec_tokens
        self.step_records.append(
            StepRecord(
                step=self.num_steps,
                start_s=step.t0 - self.start_time,
                num_seqs=len(plan.requests),
                num_decode_seqs=num_decode_seqs,
                num_prefill_seqs=len(plan.requests) - num_decode_seqs,
                num_scheduled_tokens=plan.num_scheduled_tokens,
                num_decode_tokens=num_decode_tokens,
                num_prefill_tokens=plan.num_scheduled_tokens - num_decode_tokens,
                token_bucket=plan.token_bucket,
                seq_bucket=plan.seq_bucket,
                num_padding_tokens=plan.token_bucket - plan.num_scheduled_tokens,
                num_preempted=step.num_preempted,
                pages_used=step.pages_used,
                pages_free=step.pages_free,
                host_s=step.host_s,
                device_s=step.device_s,
                num_drafts=len(drafted),
                num_draft_tokens=sum(d for d, _ in drafted),
                num_accepted_tokens=sum(a for _, a in drafted),
                accepted_per_pos=tuple(sum(a > j for _, a in drafted) for j in range(k)),
                draft_s=step.draft_s,
                experts_touched=experts_touched,
                exit_layers=tuple(exit_layers),
                ladder_rung=step.ladder_rung,
                host_blocked_s=step.host_blocked_s,
                overlapped=step.overlapped,
                num_discarded=step.num_discarded,
            )
        )

    # -- drivers --------------------------------------------------------------------------

    def precompile(self, prompt_logprobs: bool = False) -> tuple[int, float]:
        """Compile every bucket ahead of serving (the draft's steps too): (number compiled,
        seconds)."""
        num, seconds = self.runner.precompile(prompt_logprobs)
        if self.speculator is not None:
            num_draft, draft_s = self.speculator.precompile()
            num, seconds = num + num_draft, seconds + draft_s
        if self._overlap is not None:
            num_merge, merge_s = self._overlap.precompile(prompt_logprobs)  # the token merge
            num, seconds = num + num_merge, seconds + merge_s
        return num, seconds

    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Serve every prompt to completion; outputs in prompt order.

        Other requests in flight keep running alongside; their events are not consumed here
        but handed to the next ``step()`` caller."""
        if sampling is None or isinstance(sampling, SamplingParams):
            sampling = [sampling or SamplingParams()] * len(prompts)
        if len(sampling) != len(prompts):
            raise ValueError(f"{len(sampling)} SamplingParams for {len(prompts)} prompts")
        ids = [self.add_request(p, s) for p, s in zip(prompts, sampling, strict=True)]
        mine = set(ids)
        others: list[Event] = []
        while not all(self.requests[i].is_finished for i in ids) or any(
            e.request_id in mine for e in self._pending
        ):
            others.extend(e for e in self.step() if e.request_id not in mine)
        self._pending = others + self._pending
        return [self.output(i) for i in ids]

    # -- records --------------------------------------------------------------------------

    def stats(self) -> EngineStats:
        """A read-only snapshot: pool occupancy, queue lengths, KV and weight bytes."""
        return engine_stats(self.runner, self.block_manager, self.scheduler)

    def describe(self) -> dict[str, object]:
        """How the engine is laid out: tensor-parallel devices, the KV-head split (KV heads
        replicated when fewer than the devices), pages, and the weight and KV bytes one
        device holds."""
        return self.runner.describe()

    def output(self, request_id: str) -> RequestOutput:
        r = self.requests[request_id]
        text = self.tokenizer.decode(r.output_token_ids) if self.tokenizer else None
        return RequestOutput(
            request_id=r.request_id,
            prompt_token_ids=r.prompt_token_ids,
            token_ids=list(r.output_token_ids),
            text=text,
            finish_reason=r.finish_reason,
            rejected_reason=r.rejected_reason,
            logprobs=list(r.output_logprobs) if r.sampling.logprobs else None,
            prompt_logprobs=list(r.prompt_logprobs) if r.sampling.prompt_logprobs else None,
            prompt_top1=list(r.prompt_top1) if r.sampling.prompt_logprobs else None,
        )

    def requests_frame(self) -> pd.DataFrame:
        return requests_frame(self.requests.values(), self.start_time)

    def steps_frame(self) -> pd.DataFrame:
        """One row per step; the tenants' cumulative service columns (fairness.py) beside."""
        return steps_frame(self.step_records).join(self.scheduler.service.columns())
