"""Linux's SCHED_BATCH for the server's API process, so it never preempts the engine.

Each engine step ends with a pipe write that wakes the API process, and each token it
streams wakes a client. A woken task under the normal policy may preempt the task on the
core it lands on; on a CPU host that core also runs the engine process's host loop or one
of its compute threads, and the step waits for the API's Python to finish (measured in the
engine process on a 2-core host: its step writes took 20-40 µs at the median and 240-370 µs
at the 90th percentile; with the API side under SCHED_BATCH, 30-55 µs at the 90th). Under
SCHED_BATCH a woken task waits for a free core or the next scheduler tick instead: the same
CPU share, no preemption on wake-up. The engine process must keep the normal policy (it is
spawned before this is applied; a child inherits its parent's policy at spawn).

Changing between the normal and the batch policy needs no privilege. Elsewhere (no
``os.sched_setscheduler``) nothing changes, and the returned line says so.
"""

from __future__ import annotations

import os
from pathlib import Path


def thread_ids(pid: int | None = None) -> list[int]:
    """The threads of ``pid`` (default: this process; Linux: /proc/PID/task), or just the
    process elsewhere."""
    try:
        return [int(name) for name in os.listdir(Path(f"/proc/{pid or 'self'}/task"))]
    except OSError:
        return [pid or 0]


def set_batch_policy(batch: bool, tids: list[int] | None = None) -> str:
    """Put ``tids`` (default: every thread of this process) under SCHED_BATCH, or back
    under the normal policy; a line saying what was done. A thread started later inherits
    the policy of the thread that starts it."""
    if not hasattr(os, "sched_setscheduler") or not hasattr(os, "SCHED_BATCH"):
        return "scheduling policy: unchanged (this platform has no SCHED_BATCH)"
    policy = os.SCHED_BATCH if batch else os.SCHED_OTHER
    changed = 0
    for tid in thread_ids() if tids is None else tids:
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(0))
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except OSError as e:
            return f"scheduling policy: {changed} threads changed, then {e.strerror or e}"
        changed += 1
    name = "SCHED_BATCH" if batch else "normal"
    return f"scheduling policy: {name} for this process's {changed} threads"


def is_batch(pid: int = 0) -> bool:
    """Whether ``pid`` (a process or thread id; 0: the calling thread) runs under SCHED_BATCH."""
    return hasattr(os, "SCHED_BATCH") and os.sched_getscheduler(pid) == os.SCHED_BATCH
