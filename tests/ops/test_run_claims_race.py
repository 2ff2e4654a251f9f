"""Two run_claims calls at once on a metered machine start one job, not two. The MCP SDK runs
tools on worker threads, and a job is registered only once its worker has been launched: two
calls whose budget checks ended together both found no running job and both started, so
together they could spend twice what the budget had left."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

from mcp.shared.exceptions import MCPError

from claimbench.ops import runbook as runbook_module
from claimbench.ops.jobs import RUNNING, JobManager
from claimbench.ops.runbook import Runbook

LAUNCH_S = 0.05  # a worker's launch, before its job is registered (as JobManager.start does)


def test_concurrent_metered_runs_start_one_job(monkeypatch, tmp_path: Path) -> None:
    jobs = JobManager()
    started = []

    def start(kind, spec, *, agent, scope):
        time.sleep(LAUNCH_S)
        job = SimpleNamespace(job_id=f"job-{len(started):08x}", kind=kind, state=RUNNING)
        with jobs._lock:
            jobs._jobs[job.job_id] = job
        started.append(job)
        return job

    monkeypatch.setattr(jobs, "start", start)
    monkeypatch.setattr(runbook_module.registry, "has_experiment", lambda root, claim: True)
    monkeypatch.setattr(runbook_module, "_job_out", lambda job: job.job_id)
    config = SimpleNamespace(root=tmp_path, store=tmp_path / "results", dtype="float32", model=None)
    book = Runbook(config, jobs)
    monkeypatch.setattr(book, "_claim", lambda claim_id: claim_id)
    both_checked = threading.Barrier(2)

    def plan(claims, profile, trials):
        both_checked.wait(10)  # each call has read the ledger before either starts
        return SimpleNamespace(blocked=None, metered=True)

    monkeypatch.setattr(book, "spend_plan", plan)
    answers = []

    def call() -> None:
        try:
            answers.append(book.run_claims(["kv-int8"]))
        except MCPError as e:
            answers.append(str(e))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(started) == 1
    assert sum("still spending" in a for a in answers) == 1
