"""The whole runbook through MCP, on a copy of the shipped project: doctor, tpu_check at one
quick bucket, run kv-dominates, score, build the site, budget; the verdict it ends with is
the one `claimbench run` + `claimbench score` reach on their own copy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import invoke
from mcp_helpers import Ops, make_agents

from claimbench.tpucompile import check as tpu_check

REPO = Path(__file__).resolve().parents[2]
CLAIM = "kv-dominates"


def copy_project(dest: Path) -> Path:
    dest.mkdir(parents=True)
    shutil.copy(REPO / "claims.yaml", dest / "claims.yaml")
    shutil.copytree(REPO / "experiments", dest / "experiments")
    # The commit its runs record, as an exported tree carries it: a run without one is not scored.
    (dest / "SOURCE_COMMIT").write_text("c0ffee" + "0" * 34 + "\n")
    return dest


def finished(ops: Ops, job: dict, timeout_s: float) -> dict:
    status = ops.wait_job("operator", job["job_id"], lambda s: s["state"] != "running", timeout_s)
    assert status["state"] == "done", status
    return status


@pytest.mark.slow
@pytest.mark.skipif(tpu_check.libtpu_unavailable() is not None, reason="libtpu not installed")
def test_the_runbook_through_mcp_ends_with_the_clis_verdict(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "mcp-project")
    tokens = make_agents(tmp_path / "agents.yaml", operator=["read", "check", "run"])
    ops = Ops(project, tmp_path, tokens, dtype="bfloat16")
    try:
        doctor = ops.call("operator", "doctor")
        assert doctor["ok"] and doctor["engine_tokens"] == doctor["reference_tokens"]

        check = ops.call("operator", "tpu_check", {"chip": "v5e", "buckets": "16x8"})
        report = finished(ops, check, 600)["result"]
        assert report["ok"]
        (bucket,) = report["report"]["buckets"]
        assert (bucket["num_tokens"], bucket["num_seqs"]) == (16, 8)

        run = ops.call("operator", "run_claims", {"claims": [CLAIM]})
        done = finished(ops, run, 900)
        (stored,) = done["result"]["stored"]
        assert done["progress"]["trial"] == done["progress"]["num_trials"]

        written = ops.call("operator", "score")
        assert written["path"] == "results/scores.parquet"
        assert (project / written["path"]).is_file()
        site = ops.call("operator", "build_site")
        assert site["path"] == "site/index.html" and (project / "site" / "index.html").is_file()
        budget = ops.call("operator", "get_budget")
        assert (budget["num_runs"], budget["spent_usd"]) == (1, 0.0)
        runs = ops.call("operator", "list_runs", {"claim_id": CLAIM})["runs"]
        assert [r["run_id"] for r in runs] == [stored["run_id"]] and runs[0]["platform"] == "cpu"
        scores = {c["id"]: c for c in ops.call("operator", "get_scores")["claims"]}
    finally:
        ops.close()

    cli_project = copy_project(tmp_path / "cli-project")
    ran = invoke("--root", str(cli_project), "run", "--claim", CLAIM)
    assert ran.exit_code == 0, ran.output
    scored = invoke("--root", str(cli_project), "score", "--json")
    cli = {c["id"]: c for c in json.loads(scored.stdout)["claims"]}
    assert scores[CLAIM]["verdict"] == cli[CLAIM]["verdict"] == "confirmed"
    # One outcome line per call (each call let through also has a "started" line before it).
    entries = [json.loads(line) for line in ops.log.read_text().splitlines()]
    tools = [e["tool"] for e in entries if e.get("outcome") != "started"]
    assert [t for t in tools if t != "job_status"] == [
        "doctor",
        "tpu_check",
        "run_claims",
        "score",
        "build_site",
        "get_budget",
        "list_runs",
        "get_scores",
    ]
    assert ops.verify().ok
