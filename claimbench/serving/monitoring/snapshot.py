"""What the server reports about the engine's load: requests and KV pages per tenant."""

from __future__ import annotations

from dataclasses import dataclass

from claimbench.engine.engine import LLMEngine


@dataclass(frozen=True)
class EngineSnapshot:
    """What the server reports about the engine, read where the engine lives."""

    running: dict[str, int]  # requests running per tenant
    waiting: dict[str, int]  # requests waiting per tenant
    tenant_pages: dict[str, int]  # KV page references held per tenant
    num_free_pages: int
    num_usable_pages: int


def snapshot_of(engine: LLMEngine) -> EngineSnapshot:
    """The engine's snapshot, read where the engine lives."""
    stats = engine.stats()
    return EngineSnapshot(
        running=stats.running_per_tenant,
        waiting=stats.waiting_per_tenant,
        tenant_pages=stats.pages_per_tenant,
        num_free_pages=stats.num_usable_pages - stats.num_used_pages,
        num_usable_pages=stats.num_usable_pages,
    )
