"""job_cancel ends a worker whose first Ctrl-C was lost. Python reports and drops a
KeyboardInterrupt raised inside a garbage-collection callback or a __del__; JAX registers such a
callback, so a worker cancelled while importing it could run on to the end of its job (a
metered job then spent all it had planned). The cancel sends SIGINT again until the worker ends."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time

from claimbench.ops.jobs import CANCELLED, Job, JobManager

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


def start(jobs: JobManager, script: str) -> Job:
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    stderr = tempfile.TemporaryFile()  # noqa: SIM115
    job = Job("job-00000001", "run_claims", "a", "run", "now", time.monotonic(), process, stderr)
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
