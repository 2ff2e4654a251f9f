"""Two run_claims calls at once on a metered machine start one job, not two. The MCP SDK runs
tools on worker threads, and a job is registered only once its worker has been launched: two
calls whose budget checks ended together both found no running job and both started, so
together they could spend twice what the budget had left. Across processes (another server,
`claimbench run`) the results store's metered-run lock refuses the second run at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from ledger_helpers import V6E
from mcp.shared.exceptions import MCPError
from mcp_helpers import Ops, add_slow_claim, make_agents
from mcp_types import INVALID_PARAMS
from metered_lock_helpers import holder, try_hold

from claimbench.hardware import detection
from claimbench.hardware.chips import PRICE_ENV_VAR
from claimbench.ops import runbook as runbook_module
from claimbench.ops.jobs import RUNNING, JobManager
from claimbench.ops.runbook import Runbook

LAUNCH_S = 0.05  # a worker's launch, before its job is registered (as JobManager.start does)


@pytest.fixture
def on_v6e(monkeypatch):
    """The server sees one TPU v6e, a metered chip (the experiments are fake)."""
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    real = detection.detect_hardware
    monkeypatch.setattr(detection, "detect_hardware", lambda: {**real(), **V6E})


def test_concurrent_metered_runs_start_one_job(monkeypatch, tmp_path: Path) -> None:
    jobs = JobManager()
    started = []

    def start(kind, spec, *, agent, scope, pass_fds=()):
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


def metered_book(monkeypatch, tmp_path: Path, start, metered: bool = True) -> Runbook:
    """A runbook over ``tmp_path`` whose budget gate lets any run start (``metered`` or not)
    and whose job manager launches nothing: ``start`` hears each launch."""
    jobs = JobManager()
    monkeypatch.setattr(jobs, "start", start)
    monkeypatch.setattr(runbook_module.registry, "has_experiment", lambda root, claim: True)
    monkeypatch.setattr(runbook_module, "_job_out", lambda job: job.job_id)
    config = SimpleNamespace(root=tmp_path, store=tmp_path / "results", dtype="float32", model=None)
    book = Runbook(config, jobs)
    monkeypatch.setattr(book, "_claim", lambda claim_id: claim_id)
    plan = SimpleNamespace(blocked=None, metered=metered)
    monkeypatch.setattr(book, "spend_plan", lambda claims, profile, trials: plan)
    return book


def test_a_metered_run_held_by_another_process_refuses_the_tool_at_once(
    monkeypatch, tmp_path: Path
) -> None:
    store = tmp_path / "results"
    launches = []

    def start(kind, spec, *, agent, scope, pass_fds=()):
        # The worker is launched holding the lock: another process cannot take it meanwhile.
        launches.append((spec["metered_lock_fd"], pass_fds, try_hold(store).returncode))
        return SimpleNamespace(job_id="job-00000001")

    book = metered_book(monkeypatch, tmp_path, start)
    with holder(store) as other:
        with pytest.raises(MCPError) as refused:
            book.run_claims(["kv-int8"])
        assert refused.value.error.code == INVALID_PARAMS
        assert f"refused: another metered run (pid {other.pid} since " in str(refused.value)
        assert launches == []
    assert book.run_claims(["kv-int8"]) == "job-00000001"
    ((fd, pass_fds, other_try),) = launches
    assert pass_fds == (fd,) and other_try == 1
    assert try_hold(store).returncode == 0  # the server's copy is closed once it is handed on


def test_an_unmetered_run_takes_no_lock(monkeypatch, tmp_path: Path) -> None:
    launches = []

    def start(kind, spec, *, agent, scope, pass_fds=()):
        launches.append((spec["metered_lock_fd"], pass_fds))
        return SimpleNamespace(job_id="job-00000002")

    book = metered_book(monkeypatch, tmp_path, start, metered=False)
    with holder(tmp_path / "results"):
        assert book.run_claims(["kv-int8"]) == "job-00000002"
    assert launches == [(None, ())]


@pytest.mark.slow
def test_a_metered_job_s_worker_holds_the_lock_until_it_ends(project: Path, tmp_path, on_v6e):
    """Through the server and a real worker: the server hands the lock to the worker, so
    another process (or server) is refused while the job runs, and not once it is cancelled."""
    add_slow_claim(project)
    claims = project / "claims.yaml"
    settings = "budget:\n  usd: 100\n  estimate_device_s: {quick: {default: 60}}\nclaims:\n"
    claims.write_text(settings + claims.read_text())
    ops = Ops(project, tmp_path, make_agents(tmp_path / "agents.yaml", payer=["run", "spend"]))
    try:
        first = ops.call("payer", "run_claims", {"claims": ["fake-slow"]})
        worker = ops.jobs.get(first["job_id"]).process
        store = project / "results"
        assert try_hold(store).returncode == 1  # held from before the job was started
        deadline = time.monotonic() + 60
        # The worker names itself as the holder once it has adopted the lock.
        while f"(pid {worker.pid} since " not in (refused := try_hold(store)).stdout:
            assert refused.returncode == 1 and time.monotonic() < deadline, refused.stdout
            time.sleep(0.2)
        cancelled = ops.call("payer", "job_cancel", {"job_id": first["job_id"]})
        assert cancelled["state"] == "cancelled"
        assert try_hold(store).returncode == 0
    finally:
        ops.close()
