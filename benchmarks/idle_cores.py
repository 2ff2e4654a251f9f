"""How much of the cores this process may use stayed idle over a stretch of wall time.

1 - (this process's CPU seconds over the stretch, every thread, user and system, from the
process CPU clock ``time.process_time``) / (wall seconds x the cores it may run on,
``os.sched_getaffinity``). Not ``os.times``: it counts in clock ticks (10 ms), and a round of a
few milliseconds then read 0 or 10 ms of CPU, an idle share below 0 or above 1. A round of
our engine that kept both of a 2-core host's cores busy reads 0; one thread busy and the other
waiting, 0.5; asleep, 1. Time the process was ready to run but the cores ran something else
counts as idle here too. The native kernels' threads spin for a short while between calls
(kernels/native/parallel.h) and count that time (native_threads.waiting_seconds): CPU time that
computed nothing, so it is subtracted from the CPU seconds and counted idle (``waiting_s``).
They count it on each thread's CPU clock, so it is never more than the CPU seconds. The CPU
stretch is read inside the wall stretch, so the share lies in [0, 1] but for one thing: a spin
is added when it ends, so one that began before the stretch counts whole in it (at most 200 us
of CPU per kernel thread).
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
    """User and system CPU seconds of this process so far, all its threads (nanosecond clock)."""
    return time.process_time()


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
        self._wall = time.perf_counter()
        self._cpu = process_cpu_seconds()
        self._waiting = kernel_waiting_seconds()
        return self

    def __exit__(self, *exc) -> None:
        waiting = kernel_waiting_seconds()
        cpu = process_cpu_seconds()
        self.wall_s = time.perf_counter() - self._wall
        self.waiting_s = waiting - self._waiting
        self.cpu_s = cpu - self._cpu - self.waiting_s

    @property
    def idle_core_frac(self) -> float:
        return idle_core_frac(self.cpu_s, self.wall_s, self.cores)
