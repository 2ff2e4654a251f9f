"""An MCP run job's work (ops/job_work.py) runs its claims as `claimbench run` does, in-process:
each claim stored and in the ledger, a failure reported and the batch going on, progress per
claim, and each claim's compiled programs released before the next one (a long job of many
claims otherwise passes the kernel's map count, as `run --all` once did)."""

from __future__ import annotations

import pytest
from metered_lock_helpers import holder

from claimbench.ledger import ledger, metered_lock, spend_gate
from claimbench.ledger import run_claims as batch
from claimbench.ops import job_work


@pytest.fixture
def released(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(batch, "release_compiled_programs", lambda: calls.append(1))
    return calls


def spec_for(project, claims: list[str]) -> dict:
    return {
        "root": str(project),
        "results_dir": str(project / "results"),
        "claims": claims,
        "profile": "quick",
        "trials": 2,
        "seed": 0,
        "dtype": "float32",
        "model": None,
    }


@pytest.mark.slow
def test_each_claim_is_stored_or_reported_and_its_programs_released(project, released):
    events: list[dict] = []
    claims = ["fake-pass", "fake-broken", "fake-fail"]
    result = job_work.run_claims(spec_for(project, claims), events.append)
    assert [s["claim"] for s in result["stored"]] == ["fake-pass", "fake-fail"]
    assert [f["claim"] for f in result["failed"]] == ["fake-broken"]
    assert result["failed"][0]["error"].startswith("not stored: ")
    assert "\n" not in result["failed"][0]["error"]
    # Released after every claim, the failed one too.
    assert len(released) == 3
    stored = [e for e in events if e["event"] == "stored"]
    assert [(e["claim"], e["run_id"]) for e in stored] == [
        (s["claim"], s["run_id"]) for s in result["stored"]
    ]
    progress = [e for e in events if e["event"] == "progress"]
    assert {(e["claim"], e["claim_index"], e["num_claims"]) for e in progress} == {
        ("fake-pass", 1, 3),
        ("fake-broken", 2, 3),
        ("fake-fail", 3, 3),
    }
    assert max(e["trial"] for e in progress if e["claim"] == "fake-pass") == 2
    rows = ledger.read_ledger(project / "results")
    assert sorted(rows["run_id"]) == sorted(s["run_id"] for s in result["stored"])


def test_a_run_over_budget_is_refused_before_anything_runs(project, released, monkeypatch):
    blocked = type("Plan", (), {"blocked": "over budget: 2 runs left", "price": None})()
    monkeypatch.setattr(spend_gate, "plan_spend", lambda *a, **k: blocked)
    with pytest.raises(ValueError, match="over budget: 2 runs left"):
        job_work.run_claims(spec_for(project, ["fake-pass"]), lambda e: None)
    assert released == [] and not (project / "results").exists()


def test_a_metered_worker_started_without_the_lock_takes_it_or_is_refused(
    project, released, monkeypatch
):
    metered = type("Plan", (), {"blocked": None, "metered": True, "price": None})()
    monkeypatch.setattr(spend_gate, "plan_spend", lambda *a, **k: metered)
    with holder(project / "results") as other, pytest.raises(metered_lock.MeteredRunBusy) as no:
        job_work.run_claims(spec_for(project, ["fake-pass"]), lambda e: None)
    assert f"another metered run (pid {other.pid} since " in str(no.value)
    assert released == [] and not (project / "results" / "runs").exists()
