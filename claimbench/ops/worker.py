"""One MCP job's process: ``python -m claimbench.ops.worker KIND SPEC_JSON``.

Events go to the parent as JSON lines on the stdout it was started with; the work's own
prints are sent to stderr, so nothing it says can be mistaken for an event. SIGINT (job_cancel)
is Ctrl-C: the work stops where it is and, as with `claimbench run`, the run in flight is not
stored (harness/results.py writes a run only once it has finished). The worker restores
Python's Ctrl-C handler first: a process started in the background by a shell without job
control (``claimbench mcp ... &`` in a script, nohup) inherits SIGINT ignored, and so would
every worker it starts, which then ran on to the end of its job when cancelled. It also
unblocks SIGINT: a signal mask is inherited across fork and exec too, and a runner that blocks
SIGINT (as some CI runners do) left job_cancel's signal pending until the job had finished.
job_cancel sends SIGINT again every second until the worker ends (Python drops a Ctrl-C that
lands in a garbage-collection callback): once cancelled, the worker ignores the repeats while it
reports, then exits at once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, TextIO

CANCELLED_EXIT = 130  # the shell's code for Ctrl-C, as `claimbench run` exits


def _events() -> TextIO:
    """The parent's event pipe; fd 1 then points at stderr for everything else."""
    events = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return events


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # job_cancel's Ctrl-C, always
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # ... even if it was blocked
    kind, spec = argv[0], json.loads(argv[1])
    events = _events()

    def emit(event: dict[str, Any]) -> None:
        events.write(json.dumps(event, default=str) + "\n")

    try:
        from claimbench.ops.job_work import WORK  # a Ctrl-C while importing is a cancel too

        result = WORK[kind](spec, emit)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # job_cancel repeats it (ops/jobs.py)
        emit({"event": "cancelled"})
        events.flush()
        sys.stderr.flush()
        # Out now: Python's exit would wait for the threads and child processes an experiment
        # left running (an executor's queued trials), with the repeats ignored. Nothing of the
        # run in flight was stored, so no clean-up is owed.
        os._exit(CANCELLED_EXIT)
    except Exception as err:
        lines = str(err).strip().splitlines()
        emit({"event": "error", "message": lines[0] if lines else type(err).__name__})
        return 1
    emit({"event": "done", "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
