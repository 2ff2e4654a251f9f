"""Restarting the engine process when it dies, and giving up loudly when it keeps dying.

Before this, an engine process that ended (a bug, a device failure, the OOM killer) left the
server answering 503 to every tenant until a person restarted it, and SIGTERM then exited 0.
``EngineSupervisor.watch`` notices the end within ``CHECK_S``, logs the exit code and the
reason, and starts a new engine process (bounded tries, backoff doubling from
``backoff_s``). The new one serves only once its golden completion equals the one recorded
at start-up (a restart must not silently serve a different model); until then /health and
/health/ready answer 503. /metrics counts restarts (``claimbench:engine_restarts_total``),
and the new process's metrics start from the dead one's last totals (metric_totals.py).
Past ``max_restarts`` consecutive failed tries it gives up: ``state.engine_failure`` says
why and ``on_give_up`` ends the server, which then exits non-zero, so a supervisor above
(systemd, Kubernetes) sees the crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable

from claimbench.serving.api.state import ServerState
from claimbench.serving.engine_loop.batch_policy import is_batch, set_batch_policy
from claimbench.serving.engine_loop.process_engine import EngineProcessError, ProcessEngine
from claimbench.serving.engine_loop.protocol import CoreOptions

log = logging.getLogger("claimbench.serving")
CHECK_S = 0.25  # how often the engine process is looked at
MAX_RESTARTS = 3  # consecutive failed starts before giving up
BACKOFF_S = 1.0  # before the first try; doubled for each next one


class EngineSupervisor:
    """Watches ``state.engine`` (a ProcessEngine) and replaces it when it dies."""

    def __init__(
        self,
        options: CoreOptions,
        *,
        max_restarts: int = MAX_RESTARTS,
        backoff_s: float = BACKOFF_S,
        launch: Callable[[CoreOptions], ProcessEngine] | None = None,
    ) -> None:
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        self.options = options
        self.max_restarts = max_restarts
        self.backoff_s = backoff_s
        self._launch = launch or _launch

    async def watch(self, state: ServerState, on_give_up: Callable[[], None]) -> None:
        """Run until cancelled (server shutdown) or until it gives up."""
        while True:
            await asyncio.sleep(CHECK_S)
            if state.draining or state.engine.is_alive:
                continue
            engine = state.engine
            code = getattr(engine, "exitcode", None)
            reason = getattr(engine, "error", None) or "the engine loop stopped"
            log.error("engine process ended (exit code %s): %s; restarting it", code, reason)
            await engine.shutdown(timeout_s=1.0)  # reaps it and closes its pipes
            # The new process's metrics start where the dead one's last totals were.
            carried = getattr(engine, "metric_totals", None)
            if carried is not None and self.options is not None:
                self.options = dataclasses.replace(self.options, carried_metrics=carried)
            if not await self._restart(state):
                state.engine_failure = (
                    f"the engine process ended (exit code {code}) and "
                    f"{self.max_restarts} restarts failed"
                )
                log.error("%s; the server exits", state.engine_failure)
                on_give_up()
                return

    async def _restart(self, state: ServerState) -> bool:
        """A new engine in place of the dead one; False once every try failed."""
        for attempt in range(self.max_restarts):
            await asyncio.sleep(self.backoff_s * 2**attempt)
            if state.draining:
                return True  # shutting down anyway: nothing to serve
            launching = asyncio.ensure_future(asyncio.to_thread(self._launch, self.options))
            try:
                engine = await asyncio.shield(launching)
            except asyncio.CancelledError:  # the server is stopping: end what still starts
                launching.add_done_callback(_end_unused)
                raise
            except EngineProcessError as e:
                log.error("engine restart %d failed: %s", attempt + 1, e)
                continue
            golden = engine.info.golden_tokens if engine.info is not None else None
            if golden != state.golden_tokens:
                log.error(
                    "engine restart %d: golden completion %s differs from start-up's %s",
                    attempt + 1,
                    golden,
                    state.golden_tokens,
                )
                await engine.shutdown(timeout_s=5.0)
                continue
            engine.start()
            state.engine = engine
            state.readiness.forget()
            state.num_engine_restarts += 1
            hits = engine.info.num_cache_hits if engine.info is not None else 0
            log.warning(
                "engine process restarted (pid %s, %d programs from the compilation cache)",
                engine.pid,
                hits,
            )
            return True
        return False


def _end_unused(launching: asyncio.Future) -> None:
    if not launching.cancelled() and launching.exception() is None:
        launching.result().kill()


def _launch(options: CoreOptions) -> ProcessEngine:
    """A started engine process, spawned under the normal scheduling policy: a child
    inherits its spawning thread's, and this thread's is the API process's SCHED_BATCH
    when `serve` set it (the first engine was spawned before the switch)."""
    tid = threading.get_native_id()
    batch = is_batch(tid)
    if batch:
        set_batch_policy(False, [tid])
    try:
        engine = ProcessEngine(options)
        engine.launch()
    finally:
        if batch:
            set_batch_policy(True, [tid])
    return engine
