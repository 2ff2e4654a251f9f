"""`claimbench score`: the table, --json, scores.parquet, and skipped files."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_cli_claims import invoke


def run_fakes(project) -> None:
    result = invoke("--root", str(project), "run", "--claim", "fake-pass", "--claim", "fake-fail")
    assert result.exit_code == 0, result.output
    result = invoke("--root", str(project), "run", "--claim", "fake-tpu")
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_score_json(project):
    run_fakes(project)
    result = invoke("--root", str(project), "score", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert verdicts == {
        "fake-pass": "confirmed",
        "fake-fail": "refuted",
        "fake-tpu": "indicative-only",
        "fake-broken": "not-run",
        "fake-unwritten": "not-run",
    }
    statuses = {c["id"]: c["status"] for c in data["claims"]}
    assert statuses["fake-unwritten"] == "no experiment yet"
    assert statuses["fake-broken"] == "not run"
    assert data["totals"] == {
        "confirmed": 1,
        "refuted": 1,
        "inconclusive": 0,
        "indicative-only": 1,
        "not-run": 2,
    }
    cal = data["calibration"]
    # fake-pass (0.8) confirmed, fake-fail (0.6) refuted: ((0.2)^2 + (0.6)^2) / 2 = 0.2.
    assert cal["num_decided"] == 2
    assert abs(cal["brier"] - 0.2) < 1e-9 and cal["coin_brier"] == 0.25
    assert cal["brier_ci"] == pytest.approx([0.04, 0.36])  # resampling the two claims
    passed = next(c for c in data["claims"] if c["id"] == "fake-pass")
    (condition,) = passed["conditions"]
    assert (condition["basis"], condition["evidence"], condition["interval"]) == (
        "measured",
        "cpu",
        "log-t",
    )
    (group,) = passed["groups"]
    assert (group["num_runs"], group["num_current"], group["num_agree"]) == (1, 1, 1)
    assert group["runs"][0]["scored"] is True and group["runs"][0]["current"] is True
    assert data["cost_usd"] == 0.0


@pytest.mark.slow
def test_score_table_and_parquet(project):
    run_fakes(project)
    result = invoke("--root", str(project), "score")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for fragment in ("fake-pass", "confirmed", "refuted", "indicative-only", "Brier 0.200"):
        assert fragment in out
    frame = pd.read_parquet(project / "results" / "scores.parquet")
    assert set(frame["claim_id"]) == {
        "fake-pass",
        "fake-fail",
        "fake-tpu",
        "fake-broken",
        "fake-unwritten",
    }
    passed = frame[frame["claim_id"] == "fake-pass"].iloc[0]
    assert passed["verdict"] == "confirmed" and passed["evidence"] == "cpu"
    # Unit x: the geometric mean of 2, 2.01, 2.02, estimated in log space.
    assert abs(passed["estimate"] - (2.0 * 2.01 * 2.02) ** (1 / 3)) < 1e-9
    assert passed["interval"] == "log-t" and passed["num_trials"] == 3
    assert passed["basis"] == "measured" and passed["deciding_evidence"] == "cpu"
    assert bool(passed["scored"]) and bool(passed["headline"]) and bool(passed["decided"])
    assert (passed["num_runs"], passed["num_agree"]) == (1, 1)


def test_score_with_no_runs(project):
    result = invoke("--root", str(project), "score")
    assert result.exit_code == 0, result.output
    assert "5 not-run" in result.stdout
    assert "no claims decided in scope yet" in result.stdout
    assert (project / "results" / "scores.parquet").is_file()


@pytest.mark.slow
def test_score_reports_and_skips_corrupt_and_foreign_files(project):
    run_fakes(project)
    runs = project / "results" / "runs"
    (project / "results" / "notes.md").write_text("my notes")
    bad = runs / "20261129T000000Z-fake-pass-dead"
    bad.mkdir()
    (bad / "meta.json").write_text("{broken")
    result = invoke("--root", str(project), "score", "--json")
    assert result.exit_code == 0, result.output
    assert "skipped" in result.stderr and "notes.md" in result.stderr
    assert "meta.json is not valid JSON" in result.stderr
    data = json.loads(result.stdout)  # stdout stays clean JSON
    assert {c["id"]: c["verdict"] for c in data["claims"]}["fake-pass"] == "confirmed"
    assert (project / "results" / "notes.md").exists() and bad.exists()
