"""A process's children and CPU seconds, read from Linux /proc (benchmarks, tests).

Standard library only. On a system without /proc a process has no children and no
readable CPU time (``cpu_seconds`` raises OSError there, as for a process that ended).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def children(pid: int) -> list[int]:
    """The live child processes of ``pid``; a thread or child that ends between the listing
    and the read is skipped."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def process_tree(pid: int) -> list[int]:
    """The process and its descendants."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children(current)
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used; OSError once it has ended."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14, 15


def tree_cpu_seconds(pids: list[int]) -> float:
    """CPU seconds of the processes together; those that ended count 0."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total
