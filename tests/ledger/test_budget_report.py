"""ledger.budget_report, called directly: the report `claimbench budget` prints."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from ledger_helpers import row

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import run_claim
from claimbench.harness.registry import load_experiment
from claimbench.ledger import ledger
from claimbench.ledger.budget_report import TABLE_HEADERS, budget_report


def test_spend_unpriced_runs_and_per_claim_rows(tmp_path: Path) -> None:
    rows = [
        row("a", usd=1.5, device_s=2000.0, output_tokens=3_000_000),
        row("b", usd=0.5, device_s=1000.0, output_tokens=1_000_000),
        row("c", claim_id="other", usd=math.nan, device_s=50.0, chip="mi300", hardware_class="gpu"),
    ]
    ledger.append_rows(tmp_path, rows)
    report = budget_report(tmp_path, 10.0, {})
    assert report.backfilled is None and report.missing_runs == []
    data = report.to_json()
    # The unpriced run counts in runs and device seconds, never in dollars spent.
    assert (data["spent_usd"], data["remaining_usd"]) == (2.0, 8.0)
    assert (data["num_runs"], data["num_unpriced"], data["unpriced_device_s"]) == (3, 1, 50.0)
    by_claim = {r["claim_id"]: r for r in data["per_claim"]}
    assert by_claim["kv-int8"]["usd_per_mtok"] == 0.5  # $2 over 4 Mtok
    assert by_claim["other"]["usd"] is None  # NaN becomes null, not a $0 that reads as free
    table = {r[0]: r for r in report.table_rows()}
    assert all(len(r) == len(TABLE_HEADERS) for r in table.values())
    assert table["kv-int8"][1:] == ("tpu v6e", "2", "3,000", "$2.00", "4,000,000", "1,333", "$0.50")
    assert table["other"][1] == "gpu mi300" and table["other"][4] == "-"
    assert report.notes() == [
        "1 run(s) on unpriced accelerators (50 device-seconds) are not in the spend"
    ]


@pytest.mark.slow
def test_backfill_adds_the_stored_runs_the_ledger_lacks(project: Path) -> None:
    results = project / "results"
    claim = find_claim(load_claims(project), "fake-pass")
    kwargs = dict(root=project, results_dir=results, profile="quick", trials=None, seed=0)
    stored = run_claim(claim, load_experiment(project, claim), dtype="float32", **kwargs)
    before = budget_report(results, 100.0, {})
    assert before.missing_runs == [stored.name]
    assert "1 stored run(s) are not in the ledger" in before.notes()[0]
    after = budget_report(results, 100.0, {}, backfill=True)
    assert after.backfilled == 1 and after.missing_runs == [] and after.status.num_runs == 1
    assert after.notes() == []
