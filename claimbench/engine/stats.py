"""A read-only snapshot of an engine: its pool's occupancy, its queues and its byte layout.

Code outside ``engine/`` reads these instead of reaching into the runner, block manager or
scheduler; every field is a plain number, taken at the moment ``LLMEngine.stats()`` is called.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import jax

from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.sched.scheduler import Scheduler
from claimbench.engine.worker.runner import ModelRunner


@dataclass(frozen=True)
class EngineStats:
    num_running: int  # requests holding pages (admitted, not finished or preempted)
    num_waiting: int  # requests queued for admission (new or preempted)
    page_size: int  # token slots per KV page
    num_usable_pages: int  # the pool's pages, the null page excluded
    num_used_pages: int  # pages some request holds
    # Slots in the running requests' block tables (a prefix-shared page once per holder) and
    # how many of them hold a token's computed K/V: their difference is the pool's waste.
    num_held_slots: int
    num_filled_slots: int
    kv_cache_bytes: int  # bytes of the KV arrays as allocated (pages, scales, null page)
    kv_bytes_per_token: int  # one token's K and V over all layers, int8 scales included
    weight_bytes: int  # bytes of the weight arrays as held (quantized values and scales)
    compile_time_s: float  # seconds spent compiling step variants so far
    num_compilations: int  # step variants compiled so far
    # Whether the request the scheduler would admit next cannot get its next chunk's pages:
    # admission is then blocked by KV headroom, not by the sequence or token limits.
    head_blocked_on_kv: bool
    running_per_tenant: dict[str, int]  # num_running split by tenant (tenants with any)
    waiting_per_tenant: dict[str, int]  # num_waiting split by tenant (tenants with any)
    pages_per_tenant: dict[str, int]  # page references held per tenant (tenants with any)


def engine_stats(runner: ModelRunner, manager: BlockManager, scheduler: Scheduler) -> EngineStats:
    """The snapshot of one engine's parts (LLMEngine.stats() calls this)."""
    running = scheduler.running
    blocked = False
    if scheduler.waiting:
        head = next(iter(scheduler.ordering.order(scheduler.waiting, time.perf_counter())))
        budget = scheduler.cfg.scheduler.max_num_batched_tokens - len(running)
        num_tokens = min(head.num_uncomputed_tokens, max(budget, 1))
        blocked = not manager.can_allocate(head, num_tokens)
    held = [len(r.block_table) * manager.page_size for r in running]
    filled = [min(r.num_computed_tokens, h) for r, h in zip(running, held, strict=True)]
    return EngineStats(
        num_running=len(running),
        num_waiting=len(scheduler.waiting),
        page_size=manager.page_size,
        num_usable_pages=manager.num_usable_pages,
        num_used_pages=manager.num_used_pages,
        num_held_slots=sum(held),
        num_filled_slots=sum(filled),
        kv_cache_bytes=sum(int(x.nbytes) for x in jax.tree.leaves(runner.kv_caches)),
        kv_bytes_per_token=runner.kv_bytes_per_token,
        weight_bytes=runner.weight_bytes,
        compile_time_s=runner.compile_time_s,
        num_compilations=runner.num_compilations,
        head_blocked_on_kv=blocked,
        running_per_tenant=dict(Counter(r.tenant for r in running)),
        waiting_per_tenant=dict(Counter(r.tenant for r in scheduler.waiting)),
        pages_per_tenant={t: n for t, n in manager.tenant_pages.items() if n},
    )
