"""Jobs: long MCP work (claim runs, tpu-check, warming the cache) in a worker process each.

Starting one returns its id at once; a thread per job reads the worker's JSON-line events
(progress, stored runs, the result). Cancelling sends SIGINT, the worker's Ctrl-C, and waits:
the run in flight is dropped exactly as `claimbench run` drops it, so no run directory is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from claimbench.ops.worker import CANCELLED_EXIT

# A worker's Ctrl-C lands between Python bytecodes; an XLA compile in flight finishes first.
CANCEL_GRACE_S = 120.0
# Python reports and drops a KeyboardInterrupt raised inside a garbage-collection callback or a
# __del__ (JAX registers such a callback, and importing it runs it): a worker whose one Ctrl-C
# landed there ran on to the end of its job. So the signal is sent again at this interval until
# the worker ends, or until the grace period, then it is killed.
CANCEL_RESEND_S = 1.0
_STDERR_TAIL_BYTES = 2000

RUNNING, DONE, FAILED, CANCELLED = "running", "done", "failed", "cancelled"


@dataclass
class Job:
    """One job's state, as job_status reports it."""

    job_id: str
    kind: str  # a key of ops/job_work.WORK
    agent: str  # who started it: only they may see or cancel it
    scope: str  # the scope it ran under (job_cancel needs the same)
    started_at: str
    started: float  # time.monotonic() at start
    process: subprocess.Popen = field(repr=False)
    stderr: Any = field(repr=False)  # the worker's stderr, a temporary file
    state: str = RUNNING
    progress: dict[str, Any] = field(default_factory=dict)
    stored: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: str | None = None
    ended: float | None = None
    cancel_requested: bool = False

    @property
    def elapsed_s(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started


class JobManager:
    """The jobs of one MCP server."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(
        self,
        kind: str,
        spec: dict[str, Any],
        *,
        agent: str,
        scope: str,
        pass_fds: tuple[int, ...] = (),
    ) -> Job:
        """Launch ``kind``'s worker on ``spec`` (plain JSON data) and return at once;
        ``pass_fds`` stay open in the worker under the same numbers (a lock it inherits)."""
        # Kept open for the job's life (its tail explains a crash); closed when the job settles.
        stderr = tempfile.TemporaryFile()  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "claimbench.ops.worker", kind, json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            pass_fds=pass_fds,
            # Its own process group: a cancel reaches the processes an experiment started too.
            start_new_session=True,
        )
        job = Job(
            job_id="job-" + secrets.token_hex(4),
            kind=kind,
            agent=agent,
            scope=scope,
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            started=time.monotonic(),
            process=process,
            stderr=stderr,
        )
        with self._lock:
            self._jobs[job.job_id] = job
        threading.Thread(target=self._follow, args=(job,), daemon=True).start()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def running(self, kind: str) -> list[Job]:
        """The jobs of ``kind`` still running, oldest first."""
        with self._lock:
            return [j for j in self._jobs.values() if j.kind == kind and j.state == RUNNING]

    def _follow(self, job: Job) -> None:
        """Apply the worker's events until it exits, then settle the job's state."""
        assert job.process.stdout is not None
        for line in job.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue  # not an event: the worker's own are JSON objects
            with self._lock:
                kind = event.pop("event", None)
                if kind == "progress":
                    job.progress = event
                elif kind == "stored":
                    job.stored.append(event)
                elif kind == "done" and isinstance(event.get("result"), dict):
                    job.result = event["result"]
                elif kind == "error":
                    job.error = str(event.get("message", ""))
        code = job.process.wait()
        with self._lock:
            job.ended = time.monotonic()
            if code == 0 and job.result is not None:
                job.state = DONE
            elif code == CANCELLED_EXIT or job.cancel_requested:
                job.state = CANCELLED
            else:
                job.state = FAILED
                job.error = job.error or self._stderr_tail(job, code)
            job.stderr.close()

    @staticmethod
    def _stderr_tail(job: Job, code: int) -> str:
        job.stderr.seek(0, 2)
        size = job.stderr.tell()
        job.stderr.seek(max(0, size - _STDERR_TAIL_BYTES))
        lines = job.stderr.read().decode(errors="replace").strip().splitlines()
        return f"worker exited with {code}" + (f": {lines[-1]}" if lines else "")

    def cancel(self, job: Job, grace_s: float = CANCEL_GRACE_S) -> None:
        """Ctrl-C the job's worker, again every CANCEL_RESEND_S until it ends, and wait for it
        (SIGKILL after ``grace_s``)."""
        with self._lock:
            if job.state != RUNNING:
                return
            job.cancel_requested = True
        self._interrupt(job, grace_s)
        self.wait(job, timeout_s=10.0)

    @staticmethod
    def _interrupt(job: Job, grace_s: float) -> None:
        """Ctrl-C the worker's process group until the worker ends (SIGKILL after ``grace_s``),
        then kill what is left of the group: processes the job's experiment started."""
        group = job.process.pid  # the worker leads its own group (start_new_session)
        deadline = time.monotonic() + grace_s
        while job.process.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                _signal_group(group, signal.SIGKILL)
                job.process.wait()
                break
            _signal_group(group, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.process.wait(timeout=min(CANCEL_RESEND_S, left))
        _signal_group(group, signal.SIGKILL)

    def wait(self, job: Job, timeout_s: float) -> bool:
        """Wait until the follower thread has settled ``job``; whether it has."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if job.state != RUNNING:
                    return True
            time.sleep(0.05)
        return False

    def shutdown(self) -> None:
        """Cancel every running job: a server that stops leaves no worker behind."""
        with self._lock:
            running = [j for j in self._jobs.values() if j.state == RUNNING]
        # Every job is cancelled at once: one that ignores its Ctrl-C must not keep the others
        # running (and spending) through its grace period.
        threads = [
            threading.Thread(target=self.cancel, args=(job, CANCEL_GRACE_S)) for job in running
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def _signal_group(group: int, sig: int) -> None:
    """Send ``sig`` to process group ``group``; a group that has no process left is done."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)
