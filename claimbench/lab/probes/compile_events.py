"""XLA compilations counted from JAX's own monitoring events, not from the engine's books.

An engine's runner counts the step programs it compiles by bucket key, which is exactly the
set precompile walks, so that count cannot see a program compiled anywhere else (a sampler
variant, a log-prob gather, an eager array op on the host path). JAX reports every
executable it builds through ``jax.monitoring``: one ``backend_compile_duration`` event per
XLA compile request (jax 0.10; a persistent-cache hit still passes through it, and adds a
``cache_hits`` event). Counting those over a stretch of serving counts every program that
stretch had to build, whichever code path asked for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from jax import monitoring

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


@dataclass
class CompileCounter:
    """Counts JAX's compile events while entered (``with CompileCounter() as c: ...``)."""

    num_programs: int = 0  # executables built: compiled by XLA or loaded from the cache
    num_cache_hits: int = 0  # of those, loaded from the persistent compilation cache
    compile_s: float = 0.0  # seconds the builds took
    names: list[str] = field(default_factory=list)  # each build's function, e.g. jit(step_fn)

    @property
    def num_compiled(self) -> int:
        """Executables XLA compiled from scratch (built, less those the cache supplied)."""
        return self.num_programs - self.num_cache_hits

    def _on_duration(self, event: str, duration_s: float, **kwargs: Any) -> None:
        if event == BACKEND_COMPILE_EVENT:
            self.num_programs += 1
            self.compile_s += duration_s
            self.names.append(str(kwargs.get("fun_name", "?")))

    def _on_event(self, event: str, **kwargs: Any) -> None:
        if event == CACHE_HIT_EVENT:
            self.num_cache_hits += 1

    def __enter__(self) -> CompileCounter:
        monitoring.register_event_duration_secs_listener(self._on_duration)
        monitoring.register_event_listener(self._on_event)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        monitoring.unregister_event_duration_listener(self._on_duration)
        monitoring.unregister_event_listener(self._on_event)
