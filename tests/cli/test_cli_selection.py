"""`--since DATE` and `--origin NAME` on score, site and show; bad dates exit 2 in one line."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from scoring_helpers import rows, store_run
from test_cli_claims import assert_one_line_error, invoke

from claimbench.harness import results, selection
from claimbench.harness.claims import load_claims


@pytest.fixture
def stored(project):
    """fake-pass: a refuting run from lab-a on 11-28, a confirming one from lab-b on 11-30."""
    claim = next(c for c in load_claims(project) if c.id == "fake-pass")
    store = project / "results"
    a = rows("score", [0.5, 0.6, 0.7])
    store_run(store, claim, a, day="2026-11-28", origin="lab-a", root=project)
    b = rows("score", [2.0, 2.1, 2.2])
    store_run(store, claim, b, day="2026-11-30", origin="lab-b", root=project)
    return project


def _verdict(project, *options: str, command: str = "score") -> str:
    args = [command, "fake-pass"] if command == "show" else [command]
    result = invoke("--root", str(project), *args, *options, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    if command == "show":
        return data["verdict"]
    return next(c["verdict"] for c in data["claims"] if c["id"] == "fake-pass")


@pytest.mark.parametrize("command", ["score", "show"])
def test_since_and_origin_select_runs(stored, command):
    assert _verdict(stored, command=command) == "confirmed"  # the newest run
    assert _verdict(stored, "--origin", "lab-a", command=command) == "refuted"
    assert _verdict(stored, "--since", "2026-11-29", "--origin", "lab-a", command=command) == (
        "not-run"
    )
    assert _verdict(stored, "--since", "2026-11-30", command=command) == "confirmed"
    assert _verdict(stored, "--origin", "nobody", command=command) == "not-run"


def test_site_since(stored, tmp_path):
    out = tmp_path / "out"
    args = ["--root", str(stored), "site", "--out", str(out), "--origin", "lab-a"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "from 1 run(s)" in result.stdout
    row = (out / "index.html").read_text().split('id="claim-fake-pass"')[1].split("</tr>")[0]
    assert "refuted" in row and "lab-a" in row


@pytest.mark.parametrize(
    "command", [["score"], ["site"], ["show", "fake-pass"]], ids=["score", "site", "show"]
)
def test_bad_since_is_one_line(project, command):
    result = invoke("--root", str(project), *command, "--since", "yesterday-ish")
    assert_one_line_error(result, "--since 'yesterday-ish' is not a date")


@pytest.mark.slow
def test_select_runs_leaves_out_runs_without_origin_or_end(project):
    claim = load_claims(project)[0]
    store = project / "results"
    store_run(store, claim, rows("score", [2, 2, 2]), origin=None, hour=9)
    store_run(store, claim, rows("score", [2, 2, 2]), origin="lab-a", hour=10)
    runs, _ = results.read_runs(store)
    assert [r.meta.get("origin") for r in selection.select_runs(runs, origin="lab-a")] == ["lab-a"]
    since = selection.parse_since("2026-11-29T09:30:00+00:00")
    assert since == datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
    assert len(selection.select_runs(runs, since=since)) == 1
    no_end = [r for r in runs if r.meta.get("origin") is None]
    no_end[0].meta["end"] = None
    assert selection.select_runs(no_end, since=selection.parse_since("2000-01-01")) == []
