"""job_cancel and a server's shutdown end a job's worker and what it started.

Python reports and drops a KeyboardInterrupt raised inside a garbage-collection callback or a
__del__; JAX registers such a callback, so a worker cancelled while importing it could run on to
the end of its job (a metered job then spent all it had planned): the cancel sends SIGINT again
until the worker ends. The worker leads its own process group, so processes an experiment
started are stopped with it; a shutdown interrupts every job at once; event lines that are not
the worker's events leave the job's state to its exit."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from claimbench.ops import jobs as jobs_module
from claimbench.ops.jobs import CANCELLED, FAILED, Job, JobManager

# A worker that loses its first Ctrl-C, as one landing in a gc callback is lost, and stops
# (exit 130, the cancelled worker's code) on the next.
LOSES_THE_FIRST_CTRL_C = """\
import sys, time
lost = ready = False
while True:
    try:
        if not ready:
            print("ready", flush=True)
            ready = True
        time.sleep(0.05)
    except KeyboardInterrupt:
        if lost:
            sys.exit(130)
        lost = True
"""


# A worker that starts a child process (as an experiment may) and names it, then waits.
STARTS_A_CHILD = """\
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
print("ready", flush=True)
time.sleep(600)
"""

# A worker that ignores Ctrl-C (an experiment is user code and may).
IGNORES_CTRL_C = """\
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""


def start(jobs: JobManager, script: str, before_ready: list[str] | None = None) -> Job:
    """``script`` as a job's worker, started as JobManager.start starts one (its own session),
    once it has printed "ready"; the lines before that go to ``before_ready``."""
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    while (line := process.stdout.readline()) != "ready\n":
        assert line, "the worker ended before it was ready"
        if before_ready is not None:
            before_ready.append(line)
    stderr = tempfile.TemporaryFile()  # noqa: SIM115
    job_id = f"job-{len(jobs._jobs):08x}"
    job = Job(job_id, "run_claims", "a", "run", "now", time.monotonic(), process, stderr)
    jobs._jobs[job.job_id] = job
    threading.Thread(target=jobs._follow, args=(job,), daemon=True).start()
    return job


def test_a_lost_ctrl_c_is_sent_again_and_the_worker_stops_on_its_own():
    jobs = JobManager()
    job = start(jobs, LOSES_THE_FIRST_CTRL_C)
    jobs.cancel(job, grace_s=300)
    # Its own exit on the second Ctrl-C, not the kill at the end of the grace period.
    assert job.process.returncode == 130
    assert job.state == CANCELLED


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (exited, or a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def test_a_cancel_stops_the_processes_the_job_started():
    jobs = JobManager()
    named: list[str] = []
    job = start(jobs, STARTS_A_CHILD, named)
    child = int(named[0])
    jobs.cancel(job, grace_s=300)
    assert job.state == CANCELLED
    deadline = time.monotonic() + 30
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(child), f"the job's child {child} outlived the cancel"


def test_a_shutdown_does_not_leave_one_job_waiting_on_anothers_grace(monkeypatch):
    monkeypatch.setattr(jobs_module, "CANCEL_GRACE_S", 8.0)
    jobs = JobManager()
    stubborn = start(jobs, IGNORES_CTRL_C)
    quick = start(jobs, LOSES_THE_FIRST_CTRL_C)
    jobs.shutdown()
    assert stubborn.process.returncode == -9 and quick.process.returncode == 130
    # Interrupted together: the quick one ended long before the stubborn one's grace ran out.
    # One at a time, it was only signalled once that grace was over.
    assert quick.ended < stubborn.ended


def test_lines_that_are_not_events_leave_the_job_to_its_exit():
    jobs = JobManager()
    script = 'print("ready", flush=True)\nprint(1)\nprint([])\nprint(\'{"event": "done"}\')\n'
    job = start(jobs, script)
    assert jobs.wait(job, timeout_s=60)
    assert job.state == FAILED and job.result is None
