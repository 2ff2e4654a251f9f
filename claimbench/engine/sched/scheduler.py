"""Continuous batching: which requests run this step, and how many tokens each.

Running requests are served first (a decode token each, or their next prefill chunk),
then waiting requests are admitted in the ordering policy's order while the token
budget, the sequence limit and the free pages allow. Prefills are chunked to fit the
budget, so decode tokens and prefill chunks share a step. When a running request needs
a page and none is free, the victim policy picks a request to preempt (by recompute).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from claimbench.engine.config import EngineConfig
from claimbench.engine.config_ladder import Signal
from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.request import Request, RequestStatus
from claimbench.engine.sched.admission import AdmissionControl
from claimbench.engine.sched.fairness import ServiceLedger, service_tokens
from claimbench.engine.sched.kv_need import num_kv_slots
from claimbench.engine.sched.ladder import LadderState
from claimbench.engine.sched.policies import PoolView, get_victim_policy, make_ordering
from claimbench.engine.sched.quotas import KVQuotas


@dataclass
class SchedulerOutput:
    scheduled: list[tuple[Request, int]] = field(default_factory=list)  # (request, num tokens)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


class Scheduler:
    def __init__(self, cfg: EngineConfig, block_manager: BlockManager) -> None:
        self.cfg = cfg
        self.block_manager = block_manager
        params = cfg.policy_params()
        self.tenants = params.tenants
        self.ordering = make_ordering(cfg.scheduler.scheduling_policy, params)
        self.pick_victim = get_victim_policy(cfg.scheduler.victim_policy)
        self.admission = AdmissionControl(self.tenants)
        self.service = ServiceLedger()  # per-tenant service, one snapshot per step
        self.quotas = (
            KVQuotas(self.tenants, block_manager.num_usable_pages)
            if self.tenants.has_kv_quotas
            else None
        )
        self.ladder = LadderState(cfg.scheduler.ladder)
        self.waiting: list[Request] = []
        self.running: list[Request] = []

    def admit(self, request: Request) -> str | None:
        """Why the request can never be served (then it is rejected), or None."""
        if request.num_prompt_tokens == 0:
            return "empty prompt"
        max_model_len = self.cfg.scheduler.max_model_len
        if request.max_total_tokens > max_model_len:
            return (
                f"prompt ({request.num_prompt_tokens} tokens) + max_tokens "
                f"({request.sampling.max_tokens}) exceeds max_model_len={max_model_len}"
            )
        # The pages the reserve modes take at admission and paged mode grows into.
        pages = self.block_manager.num_pages_for(num_kv_slots(self.cfg, request))
        if pages > self.block_manager.num_usable_pages:
            return (
                f"needs {pages} KV pages at full length but the whole pool has "
                f"{self.block_manager.num_usable_pages}"
            )
        if self.quotas is not None and pages > self.quotas.max_pages(request.tenant):
            return (
                f"needs {pages} KV pages at full length but tenant {request.tenant!r} may hold "
                f"at most {self.quotas.max_pages(request.tenant)}"
            )
        never = self.admission.never_admits(request)
        if never is not None:
            return never
        # Shed before the limits are checked: a shed request spends none of its tokens.
        shed = self.ladder.shed_reason(self.tenants.get(request.tenant).tier_for(request.priority))
        if shed is not None:
            self.admission.record_shed(request.tenant)
            return shed
        return self.admission.admit(request, self.waiting)

    def add(self, request: Request) -> None:
        request.priority = self.tenants.get(request.tenant).tier_for(request.priority)
        self.ordering.on_arrival(request, self.waiting)
        self.waiting.append(request)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def speculating(self) -> list[Request]:
        """The running requests a speculator may propose for: none while the ladder has
        speculation off, so no draft model runs for drafts that would not be verified."""
        return [] if self.ladder.speculation_disabled else self.running

    def load_signals(self, now: float) -> dict[Signal, float]:
        """The load signals the degradation ladder climbs and descends on."""
        oldest = min((r.arrival_time for r in self.waiting), default=now)
        return {
            Signal.WAITING_REQUESTS: float(len(self.waiting)),
            Signal.KV_USAGE: self.block_manager.num_used_pages
            / self.block_manager.num_usable_pages,
            Signal.OLDEST_WAIT_S: max(0.0, now - oldest),
        }

    def schedule(self, now: float) -> SchedulerOutput:
        if self.ladder.rungs:
            self.ladder.observe(self.load_signals(now), now)
        backlogged = {r.tenant for r in self.waiting}
        out = self._pick(now)
        if out.scheduled:
            # Context the running batch holds once this step's tokens are computed.
            running_tokens = sum(r.num_computed_tokens for r in self.running)
            self.service.record_step(backlogged, running_tokens + out.num_scheduled_tokens)
        return out

    def _fits(self, request: Request, num_tokens: int) -> bool:
        """Whether the request's next pages are free and within its tenant's KV quota."""
        if not self.block_manager.can_allocate(request, num_tokens):
            return False
        return self.quotas is None or self.quotas.fits(self.block_manager, request, num_tokens)

    def _pick(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.ladder.token_budget(self.cfg.scheduler.max_num_batched_tokens)
        if self.ladder.speculation_disabled:
            # Drafts proposed before the rung engaged are never verified.
            for request in self.running:
                request.spec_token_ids = []
        scheduled_ids: set[str] = set()
        for request in self.ordering.order(self.running, now):
            if budget == 0:
                break
            if request.status is not RequestStatus.RUNNING:  # preempted earlier in this loop
                continue
            num_tokens = min(request.num_uncomputed_tokens, budget)
            if request.spec_token_ids and request.num_uncomputed_tokens == 1:
                num_tokens = self._with_draft(request, budget)
            if not self._make_room(request, num_tokens, scheduled_ids, out):
                continue
            self._schedule(request, num_tokens, now, out, scheduled_ids)
            budget -= num_tokens
        if out.preempted and self.quotas is None:
            # Pages are short: admitting now would only preempt again next step.
            return out
        # Under quotas pages are short only for the tenants that just lost some.
        short = {r.tenant for r in out.preempted}
        for request in self.ordering.order(self.waiting, now):
            if budget == 0 or len(self.running) >= self.cfg.scheduler.max_num_seqs:
                break
            if request.tenant in short:
                continue
            # A cached prefix is taken by reference: only the tokens after it are computed.
            num_cached = self.block_manager.match_prefix(request)
            num_tokens = min(request.num_uncomputed_tokens - num_cached, budget)
            num_reserved = self._admission_tokens(request, num_tokens, num_cached)
            if not self._fits(request, num_reserved):
                if self.quotas is None:
                    break
                continue  # a tenant at its quota must not block the others behind it
            self.waiting.remove(request)
            self.running.append(request)
            request.status = RequestStatus.RUNNING
            self._cap_max_tokens(request)
            self._schedule(request, num_tokens, now, out, scheduled_ids, num_reserved)
            budget -= num_tokens
        return out

    def _cap_max_tokens(self, request: Request) -> None:
        """A request that starts while a cap_max_tokens rung covers its tier gets the cap
        (it keeps it: a capped answer ends with finish_reason "length"). One that already
        produced tokens (preempted, now resumed) keeps what it started with."""
        cap = self.ladder.max_tokens_cap(request.priority)
        if cap is not None and request.num_output_tokens == 0 and request.sampling.max_tokens > cap:
            request.sampling = dataclasses.replace(request.sampling, max_tokens=cap)

    def _with_draft(self, request: Request, budget: int) -> int:
        """Tokens for a caught-up request with draft tokens: its last token and as many drafts
        as the budget and the free pages allow. Speculation never preempts anyone."""
        num_tokens = min(1 + len(request.spec_token_ids), budget)
        return num_tokens if self._fits(request, num_tokens) else 1

    def _admission_tokens(self, request: Request, num_tokens: int, num_cached: int) -> int:
        """Tokens to allocate pages for when admitting: this step's, or under the reserve
        modes every slot admission counted (``num_kv_slots``), counted like allocate from
        the cached prefix."""
        if self.cfg.cache.kv_allocation == "paged":
            return num_tokens
        return max(num_tokens, num_kv_slots(self.cfg, request) - num_cached)

    def _make_room(
        self, request: Request, num_tokens: int, scheduled_ids: set[str], out: SchedulerOutput
    ) -> bool:
        """Preempt until the request's pages fit; False if it was itself the victim."""
        while not self._fits(request, num_tokens):
            candidates = [r for r in self.running if r.request_id not in scheduled_ids]
            if self.quotas is not None:
                # Only tenants over their guarantee (or the tenant itself) can make room.
                helpful = self.quotas.victim_candidates(
                    request.tenant, candidates, self.block_manager.tenant_pages
                )
                candidates = helpful or [request]
            pool = PoolView(
                self.block_manager.tenant_pages, self.block_manager.num_usable_pages, self.tenants
            )
            victim = self.pick_victim(candidates, pool)
            self.preempt(victim)
            out.preempted.append(victim)
            if victim is request:
                return False
        return True

    def _schedule(
        self,
        request: Request,
        num_tokens: int,
        now: float,
        out: SchedulerOutput,
        scheduled_ids: set[str],
        num_reserved: int | None = None,
    ) -> None:
        # num_reserved >= num_tokens: the pages allocated, which may run ahead of the step's.
        self.block_manager.allocate(request, num_tokens if num_reserved is None else num_reserved)
        # After allocate: a cached prefix moves num_computed_tokens, and is not service.
        # Draft tokens are charged only once accepted (charge_accepted).
        num_verified = min(num_tokens, request.num_uncomputed_tokens)
        num_input, num_output = service_tokens(request, num_verified)
        self.ordering.charge(request, num_input, num_output)
        self.service.charge(request.tenant, num_input, num_output)
        if request.first_scheduled_time is None:
            request.first_scheduled_time = now
        out.scheduled.append((request, num_tokens))
        scheduled_ids.add(request.request_id)

    def charge_accepted(self, request: Request, num_accepted: int) -> None:
        """Charge accepted draft tokens as output service (the step's own sampled token was
        charged when it was scheduled), so fair share counts every token a tenant receives."""
        if num_accepted:
            self.ordering.charge(request, 0, num_accepted)
            self.service.charge_accepted(request.tenant, num_accepted)

    def preempt(self, request: Request) -> None:
        """Free the request's pages and send it back to wait; it will recompute."""
        request.spec_token_ids = []
        self.service.record_preemption(request)
        self.block_manager.free(request)
        self.running.remove(request)
        request.status = RequestStatus.WAITING
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.append(request)

    def finish(self, request: Request) -> None:
        """Take a running or waiting request out of the scheduler and free its pages."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.block_manager.free(request)
