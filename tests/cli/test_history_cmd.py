"""`claimbench history`: what changed since last night or a date, a claim's runs, --json, and
bad input as one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, invoke
from history_helpers import history_project, peer_record

from claimbench.bench import peers


def test_since_a_date_lists_each_change_with_its_commits(tmp_path: Path) -> None:
    root = history_project(tmp_path / "p")
    result = invoke("--root", str(root), "history", "--since", "2026-11-30")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(
        "c cpu: verdict flipped: confirmed -> refuted (bbbbbbbbbb -> cccccccccc" in line
        for line in lines
    )
    assert any("c cpu: shift beyond noise on gain >= 1.5" in line for line in lines)
    assert any("c cpu: design changed" in line for line in lines)
    assert any("c tpu: new hardware class" in line for line in lines)
    # No experiment file: no run is of today's design.
    assert any("unscored: design changed" in line for line in lines)


def test_json_and_a_claim_s_runs(tmp_path: Path) -> None:
    root = history_project(tmp_path / "p")
    result = invoke("--root", str(root), "history", "--claim", "c", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["since"] == "2026-12-03"  # last night
    assert [c["kind"] for c in data["changes"]] == [
        "new hardware class",
        "unscored: design changed",
        "unscored: design changed",
    ]
    cpu = next(s for s in data["series"] if s["evidence"] == "cpu")
    assert [r["date"] for r in cpu["runs"]] == [
        "2026-11-29",
        "2026-11-30",
        "2026-12-01",
        "2026-12-02",
    ]
    first = cpu["runs"][0]
    assert first["commit"] == "a" * 10 and first["verdict"] == "confirmed"
    assert (
        first["scored"] is False
        and first["not_scored_because"] == "measured with an earlier design"
    )
    (gain,) = first["conditions"]
    assert gain["ci_lo"] < gain["estimate"] < gain["ci_hi"]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    root = history_project(tmp_path / "p")
    assert_one_line_error(
        invoke("--root", str(root), "history", "--claim", "nope"), "no claim 'nope'"
    )
    assert_one_line_error(
        invoke("--root", str(root), "history", "--since", "yesterday"), "--since 'yesterday'"
    )


def test_an_engine_latency_regression_is_listed(tmp_path: Path) -> None:
    root = history_project(tmp_path / "p")
    for day, tpot_p99 in (("2026-12-02", [5.0, 5.2, 4.8]), ("2026-12-03", [8.0, 8.2, 7.8])):
        record = peer_record(day, [100.0, 101.0, 99.0], [50.0, 51.0, 49.0])
        record["result"]["ours"]["tpot_ms_rounds"] = {"p50": [2.0, 2.0, 2.0], "p99": tpot_p99}
        peers.store_peer(root / "results", record)
    result = invoke("--root", str(root), "history", "--json")
    assert result.exit_code == 0, result.output
    engine = json.loads(result.output)["engine"]
    assert [(c["metric"], c["kind"]) for c in engine] == [
        ("ours TPOT p99", "regression beyond noise")
    ]
    assert engine[0]["line"].startswith("engine TPU v6e x1: ours TPOT p99 regression beyond")
