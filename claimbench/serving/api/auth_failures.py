"""Failed authentication, limited per client address.

A client could try 1,497 wrong keys in 2 s on one connection. Every 401 now ends its
connection, and a client address with MAX_FAILURES failed keys (missing or wrong, on any
route that takes a key: /v1 and a keyed /metrics) within WINDOW_S gets 429 with Retry-After
for every request that presents a key until the oldest of them leaves the window, its key
not even checked (a correct key answered otherwise would tell a guesser it had found one).
Keys are random 32-byte tokens, so this is about the load and the logs, not the odds.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable

MAX_FAILURES = 20  # failed keys one client address may send per window
WINDOW_S = 60.0
MAX_CLIENTS = 65536  # addresses remembered at once (the oldest forgotten first)


class FailedAuth:
    """Recent failed authentications per client address."""

    def __init__(
        self,
        max_failures: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_failures < 1:
            raise ValueError(f"max_failures must be >= 1, got {max_failures}")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, collections.deque[float]] = {}

    def retry_after_s(self, client: str) -> float | None:
        """Seconds until ``client`` may try a key again, or None if it may now."""
        times = self._failures.get(client)
        if times is None:
            return None
        now = self._clock()
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        if len(times) < self.max_failures:
            return None
        return times[0] + self.window_s - now

    def record(self, client: str) -> None:
        """``client`` sent a missing or wrong key."""
        times = self._failures.pop(client, None) or collections.deque(maxlen=self.max_failures)
        times.append(self._clock())
        self._failures[client] = times  # last in the order: the most recent
        if len(self._failures) > MAX_CLIENTS:
            del self._failures[next(iter(self._failures))]


def retry_after_header(seconds: float) -> str:
    """Retry-After's whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
