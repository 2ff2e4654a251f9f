"""How much of the cores this process may use stayed idle over a stretch of wall time.

1 - (this process's CPU seconds over the stretch, every thread, user and system, from
``os.times``) / (wall seconds x the cores it may run on, ``os.sched_getaffinity``). A round of
our engine that kept both of a 2-core host's cores busy reads 0; one thread busy and the other
waiting, 0.5; asleep, 1. Time the process was ready to run but the cores ran something else
counts as idle here too. The native kernels' threads spin for a short while between calls
(kernels/native/parallel.h) and count that time (native_threads.waiting_seconds): CPU time that
computed nothing, so it is subtracted from the CPU seconds and counted idle (``waiting_s``).
"""

from __future__ import annotations

import os
import time


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def process_cpu_seconds() -> float:
    """User and system CPU seconds of this process so far, all its threads."""
    t = os.times()
    return t.user + t.system


def kernel_waiting_seconds() -> float:
    """Seconds the native kernels' threads have spun without work so far; 0 without them."""
    try:
        from claimbench.kernels import native_threads

        return native_threads.waiting_seconds()
    except Exception:  # no native library here: nothing spins
        return 0.0


def idle_core_frac(cpu_s: float, wall_s: float, cores: int) -> float:
    """The share of ``cores`` x ``wall_s`` core-seconds not spent by ``cpu_s`` of CPU time."""
    if wall_s <= 0 or cores < 1:
        raise ValueError(f"need wall_s > 0 and cores >= 1, got {wall_s}, {cores}")
    return 1.0 - cpu_s / (wall_s * cores)


class IdleMeter:
    """``with IdleMeter() as m: ...`` then ``m.idle_core_frac`` (and ``m.cpu_s``, ``m.wall_s``,
    ``m.cores``, ``m.waiting_s``) of the block; ``cpu_s`` is the CPU time less the kernels'
    threads' spinning without work."""

    def __init__(self, cores: int | None = None) -> None:
        self.cores = cores or usable_cores()
        self.cpu_s = self.wall_s = self.waiting_s = 0.0

    def __enter__(self) -> IdleMeter:
        self._waiting = kernel_waiting_seconds()
        self._cpu, self._wall = process_cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self._wall
        self.waiting_s = kernel_waiting_seconds() - self._waiting
        self.cpu_s = process_cpu_seconds() - self._cpu - self.waiting_s

    @property
    def idle_core_frac(self) -> float:
        return idle_core_frac(self.cpu_s, self.wall_s, self.cores)
