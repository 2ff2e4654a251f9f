"""/metrics' page, rendered at most once per PAGE_CACHE_S whoever asks how often.

Rendering the page asks the engine (its process renders the counters it observes, and the
gauges come from a snapshot of its scheduler), and the engine answers between steps: four
keyless clients looping on /metrics over keep-alive connections made it render thousands
of pages, and a 60-token stream beside them took 16.8 s instead of 1 to 2. Here callers
arriving while a page renders wait for that page, and a page is reused for PAGE_CACHE_S
(Prometheus scrapes every 15 s by default), so the engine renders at most one page per
PAGE_CACHE_S however many clients ask, plus one per request that ended meanwhile (a client
that reads /metrics after its request ends sees that request counted; a request costs the
engine far more than a page).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

PAGE_CACHE_S = 1.0  # a rendered page is served this long


class MetricsPage:
    """The latest page from ``render``, rendered again only once it is ``cache_s`` old.
    An exception from ``render`` (EngineStopped) propagates and is not kept."""

    def __init__(self, render: Callable[[], Awaitable[bytes]], cache_s: float = PAGE_CACHE_S):
        if not cache_s >= 0:
            raise ValueError(f"cache_s must be >= 0, got {cache_s}")
        self.cache_s = cache_s
        self.num_renders = 0  # pages rendered (not pages served)
        self._render = render
        self._lock = asyncio.Lock()
        self._page = b""
        self._time = -math.inf
        self._version = -1  # the caller's version when the kept page was rendered

    def forget(self) -> None:
        """Drop the kept page (the engine was replaced)."""
        self._time = -math.inf

    async def get(self, version: int = 0) -> bytes:
        """The page: the kept one while it is fresh and was rendered at this ``version`` (of
        what it shows: a count of ended requests), else a new one. One render at a time:
        callers arriving during a render get its page."""
        async with self._lock:
            fresh = time.monotonic() - self._time < self.cache_s
            if fresh and version == self._version:
                return self._page
            self.num_renders += 1
            page = await self._render()
            self._page, self._time, self._version = page, time.monotonic(), version
            return page
