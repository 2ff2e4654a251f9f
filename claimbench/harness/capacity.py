"""KV capacity measured on an engine: how many sequences its pool really holds at once.

The engine sizes its pool from the real bytes per token of its cache format (int8 scales
and fp8 tensor scales included) and pages it; this fills that pool through the engine's
own block manager with sequences of one fixed length until an allocation fails, then gives
every page back. Page rounding, the null page and the scales are all in the count.
"""

from __future__ import annotations

from claimbench.engine.engine import LLMEngine
from claimbench.engine.request import Request
from claimbench.engine.sampler import SamplingParams


def fill_capacity(engine: LLMEngine, seq_len: int) -> int:
    """Sequences of ``seq_len`` tokens that fit in the engine's KV pool at once.

    The pool must be empty and prefix caching off (identical sequences would share pages).
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if engine.config.prefix_caching != "off":
        raise ValueError(
            f"capacity needs prefix_caching='off', got {engine.config.prefix_caching!r}"
        )
    manager = engine.block_manager
    if manager.num_used_pages:
        raise ValueError(f"the pool must be empty; {manager.num_used_pages} pages are in use")
    held: list[Request] = []
    while True:
        n = len(held)
        request = Request(
            f"capacity-{n}",
            n,
            [0] * seq_len,
            SamplingParams(max_tokens=1),
            seed=0,
            tenant="capacity",
            priority=0,
            arrival_time=0.0,
        )
        if not manager.can_allocate(request, seq_len):
            break
        manager.allocate(request, seq_len)
        held.append(request)
    for request in held:
        manager.free(request)
    return len(held)
