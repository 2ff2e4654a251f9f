"""`claimbench list` and `claimbench show`, on the shipped claims and on a tmp --root project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, invoke
from typer.testing import CliRunner

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_list_shipped_claims_json():
    result = invoke("--root", str(REPO), "list", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 27
    assert set(rows[0]) == {"id", "part", "title", "confidence", "scope", "status"}
    for row in rows:
        written = (REPO / "experiments" / f"{row['id'].replace('-', '_')}.py").is_file()
        assert (row["status"] == "no experiment yet") == (not written), row


def test_list_table(project):
    result = invoke("--root", str(project), "list")
    assert result.exit_code == 0, result.output
    for fragment in ("fake-pass", "fake-unwritten", "no experiment yet", "not run", "5 claims"):
        assert fragment in result.stdout


def test_list_shows_verdicts_after_a_run(project):
    assert invoke("--root", str(project), "run", "--claim", "fake-pass").exit_code == 0
    rows = json.loads(invoke("--root", str(project), "list", "--json").stdout)
    assert {row["id"]: row["status"] for row in rows} == {
        "fake-pass": "confirmed",
        "fake-fail": "not run",
        "fake-tpu": "not run",
        "fake-broken": "not run",
        "fake-unwritten": "no experiment yet",
    }


def test_show(project):
    result = invoke("--root", str(project), "show", "fake-tpu")
    assert result.exit_code == 0, result.output
    for fragment in ("Fake claim about TPUs", "score >= 1", "refuted if:", "scope tpu", "no runs"):
        assert fragment in result.stdout


def test_show_json_with_evidence(project):
    assert invoke("--root", str(project), "run", "--claim", "fake-tpu").exit_code == 0
    result = invoke("--root", str(project), "show", "fake-tpu", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["id"] == "fake-tpu" and data["scope"] == "tpu"
    assert data["verdict"] == "indicative-only" and data["status"] == "indicative-only"
    (group,) = data["groups"]
    assert group["evidence"] == "cpu" and group["in_scope"] is False
    (run,) = group["runs"]
    (condition,) = run["conditions"]
    assert condition["trial_values"] == pytest.approx([2.0, 2.01, 2.02])
    assert condition["in_scope"] is False and data["decided"] is False
    assert data["prediction"] == [
        {"metric": "score", "op": ">=", "value": 1.0, "basis": "measured", "model_class": None}
    ]


def test_show_unknown_claim(project):
    assert_one_line_error(invoke("--root", str(project), "show", "nope"), "no claim 'nope'")


@pytest.mark.parametrize("command", [["list"], ["show", "fake-pass"], ["score"], ["site"]])
def test_bad_claims_file_exits_2_for_every_command(project, command):
    (project / "claims.yaml").write_text("- id: fake-pass\n  part: [1\n")
    result = invoke("--root", str(project), *command)
    assert_one_line_error(result, "claims.yaml: not valid YAML at line")


def test_duplicate_id_through_the_cli(project):
    text = (project / "claims.yaml").read_text()
    first = text.split("- id: fake-fail")[0]
    (project / "claims.yaml").write_text(text + first)
    assert_one_line_error(
        invoke("--root", str(project), "list"), "claim 'fake-pass': field 'id': duplicate id"
    )


def test_missing_named_experiment_through_the_cli(project):
    (project / "experiments" / "broken.py").unlink()
    assert_one_line_error(
        invoke("--root", str(project), "list"),
        "claim 'fake-broken': field 'experiment': experiments/broken.py does not exist",
    )


def test_no_claims_file(tmp_path):
    assert_one_line_error(invoke("--root", str(tmp_path), "list"), "no claims.yaml in")


def test_root_must_exist(tmp_path):
    assert_one_line_error(invoke("--root", str(tmp_path / "absent"), "list"), "is not a directory")
