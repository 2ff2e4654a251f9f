"""A request's events on the server's side: its stream, and the hand-over interval.

Each request's events go to its own ``RequestStream``, handed over once per engine step
(not once per token: at 16 streams that would be 16 wake-ups of the server's loop per
step), and ``StreamInterval`` may hold a request's tokens back to hand them over in groups.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence

from claimbench.engine.outputs import Event, FinishEvent, RejectEvent, TokenEvent


class RequestStream:
    """One request's events, as the engine delivers them, read on the server's event loop.

    A deque and one waiter future rather than an asyncio.Queue: a step's events for a
    request arrive together and are taken together, one wake-up per step. A reader that
    only wants the whole output (``wake_at_end``) is woken once, by its last event.

    A ``listener`` may take a step's events as they are pushed, with no reader woken: it
    returns True when it took them all, False (having taken none) to let them queue. It is
    offered events only while nothing is queued, so nothing overtakes a queued event."""

    # Streams whose last event has arrived, over all servers in the process: /metrics
    # renders a new page once one has (metrics_page.py), else reuses its last for a while.
    num_ended = 0

    def __init__(self, request_id: str = "") -> None:
        self.request_id = request_id
        self.listener: Callable[[Sequence[Event | Exception]], bool] | None = None
        self._events: collections.deque[Event | Exception] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._at_end_only = False
        self._ended = False  # the last event (a finish, a rejection or an error) is queued

    def wake_at_end(self) -> None:
        """From now on, wake the reader only once the request's last event is queued."""
        self._at_end_only = True

    def push(self, events: Sequence[Event | Exception]) -> None:
        """Add events (on the event loop's thread) and wake the reader, unless the
        listener takes them."""
        if events and isinstance(events[-1], FinishEvent | RejectEvent | Exception):
            RequestStream.num_ended += 1
        listener = self.listener
        if listener is not None and not self._events and listener(events):
            return
        self._events.extend(events)
        if events and isinstance(events[-1], FinishEvent | RejectEvent | Exception):
            self._ended = True
        elif self._at_end_only:
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        while not self._events or (self._at_end_only and not self._ended):
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def next(self) -> Event:
        """The next event; EngineStopped if the loop died before the request finished."""
        await self._wait()
        event = self._events.popleft()
        if isinstance(event, Exception):
            raise event
        return event

    async def next_batch(self) -> list[Event]:
        """Every event queued (waiting for one if there is none): a consumer that fell
        behind the engine catches up in one go instead of one wake-up per token."""
        await self._wait()
        batch = []
        while self._events:
            event = self._events.popleft()
            if isinstance(event, Exception):
                if batch:  # what came before the failure first; it stays queued
                    self._events.appendleft(event)
                    return batch
                raise event
            batch.append(event)
        return batch


class StreamInterval:
    """Holds a request's tokens back until every ``interval``-th one (its first token and
    its finish go at once): fewer hand-overs and SSE writes per token, as vLLM's
    --stream-interval, at the price of a coarser stream."""

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise ValueError(f"stream_interval must be >= 1, got {interval}")
        self.interval = interval
        self._held: dict[str, list[Event]] = {}  # tokens not yet handed over

    def hand_over(self, event: Event, last: bool) -> list[Event]:
        """The events of ``event``'s request to hand over now: none while its tokens are
        held back, else every held one and ``event``."""
        if self.interval == 1:
            return [event]
        held = self._held.setdefault(event.request_id, [])
        held.append(event)
        due = isinstance(event, TokenEvent) and event.index % self.interval == 0
        if not (last or due):
            return []
        del self._held[event.request_id]
        return held

    def drop(self, request_id: str) -> None:
        """Forget what is held for a request nobody listens to any more."""
        self._held.pop(request_id, None)
