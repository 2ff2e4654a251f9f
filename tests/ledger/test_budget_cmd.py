"""`claimbench budget` and the ledger hooks of `claimbench run`, on a tmp project with fake
experiments: every stored run lands in the ledger, and `run` refuses work the budget cannot pay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, invoke
from ledger_helpers import V6E, row, with_settings

from claimbench.hardware import detection
from claimbench.hardware.chips import PRICE_ENV_VAR
from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import run_claim
from claimbench.harness.registry import load_experiment
from claimbench.ledger import ledger


@pytest.fixture
def on_v6e(monkeypatch):
    """The harness sees one TPU v6e (the experiments are fake, so nothing needs the chip)."""
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    real = detection.detect_hardware
    monkeypatch.setattr(detection, "detect_hardware", lambda: {**real(), **V6E})


def runs(results: Path) -> list[Path]:
    return sorted((results / "runs").iterdir()) if (results / "runs").is_dir() else []


def test_cpu_run_lands_in_the_ledger_at_zero_dollars(project: Path) -> None:
    result = invoke("--root", str(project), "run", "--claim", "fake-pass")
    assert result.exit_code == 0, result.output
    (run_dir,) = runs(project / "results")
    table = ledger.read_ledger(project / "results")
    assert table["run_id"].tolist() == [run_dir.name]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert table["device_s"].item() == pytest.approx(meta["wall_s"]) and table["usd"].item() == 0
    report = json.loads(invoke("--root", str(project), "budget", "--json").stdout)
    assert (report["spent_usd"], report["remaining_usd"], report["num_runs"]) == (0.0, 100.0, 1)
    assert report["runs_not_in_ledger"] == []
    assert [r["claim_id"] for r in report["per_claim"]] == ["fake-pass"]


def test_refuses_work_over_the_remaining_budget_unless_told(project: Path, on_v6e) -> None:
    with_settings(project)
    results = project / "results"
    ledger.append_rows(results, [row("earlier", claim_id="other", usd=99.0)])
    args = ("--root", str(project), "run", "--claim", "fake-pass", "--profile", "full")
    refused = invoke(*args)
    assert_one_line_error(refused, "estimated cost $5.40 exceeds the remaining budget $1.00")
    assert runs(results) == []
    result = invoke(*args, "--over-budget")
    assert result.exit_code == 0, result.output
    (run_dir,) = runs(results)
    table = ledger.read_ledger(results).set_index("run_id")
    assert list(table.index) == ["earlier", run_dir.name]
    paid = table.loc[run_dir.name]
    assert (paid["chip"], paid["usd_per_chip_hour"]) == ("v6e", 2.70)
    assert paid["usd"] == pytest.approx(paid["device_s"] * 2.70 / 3600)
    report = json.loads(invoke("--root", str(project), "budget", "--json").stdout)
    assert report["spent_usd"] == pytest.approx(99.0 + paid["usd"])


def test_the_next_estimate_comes_from_the_ledger(project: Path, on_v6e) -> None:
    with_settings(project)
    results = project / "results"
    # An earlier fake-pass run on this chip took 40 s for 4 trials: far under the declared 7200.
    ledger.append_rows(results, [row("a", claim_id="fake-pass", device_s=40.0, trials=4, usd=0.03)])
    ledger.append_rows(results, [row("b", claim_id="other", usd=99.9)])
    # Remaining $0.07; 40 s of a v6e is $0.03, so the run fits.
    result = invoke("--root", str(project), "run", "--claim", "fake-pass", "--profile", "full")
    assert result.exit_code == 0, result.output
    assert "estimated cost $0.03" in result.stdout


def test_a_corrupt_ledger_stops_run_and_budget(project: Path) -> None:
    results = project / "results"
    results.mkdir()
    ledger.ledger_path(results).write_bytes(b"garbage")
    assert_one_line_error(invoke("--root", str(project), "budget"), "not a readable ledger")
    run = invoke("--root", str(project), "run", "--claim", "fake-pass")
    assert_one_line_error(run, "not a readable ledger")
    assert runs(results) == [] and ledger.ledger_path(results).read_bytes() == b"garbage"


def test_backfill_adds_runs_stored_before_the_ledger(project: Path) -> None:
    results = project / "results"
    claim = find_claim(load_claims(project), "fake-pass")
    old = run_claim(
        claim,
        load_experiment(project, claim),
        root=project,
        results_dir=results,
        profile="quick",
        trials=None,
        seed=0,
        dtype="float32",
    )
    before = invoke("--root", str(project), "budget")
    assert before.exit_code == 0 and "1 stored run(s) are not in the ledger" in before.stdout
    assert invoke("--root", str(project), "budget", "--backfill").exit_code == 0
    table = ledger.read_ledger(results)
    assert table["run_id"].tolist() == [old.name] and table["source"].tolist() == ["backfill"]
    again = json.loads(invoke("--root", str(project), "budget", "--backfill", "--json").stdout)
    assert again["num_runs"] == 1 and again["runs_not_in_ledger"] == []


def test_bad_settings_are_one_line(project: Path) -> None:
    path = project / "claims.yaml"
    path.write_text("budget: {usd: -5}\nclaims:\n" + path.read_text())
    assert_one_line_error(invoke("--root", str(project), "budget"), "setting 'budget.usd'")


def test_site_shows_spend_against_the_budget_and_dollars_per_mtok(project: Path) -> None:
    results = project / "results"
    ledger.append_rows(
        results,
        [
            row("a", claim_id="fake-pass", usd=1.0, device_s=1000.0, output_tokens=400_000),
            row("b", claim_id="fake-pass", usd=2.0, device_s=2000.0, output_tokens=600_000),
            row("c", claim_id="fake-pass", hardware_class="cpu", chip="cpu", usd=0.0),
        ],
    )
    out = project / "site"
    result = invoke("--root", str(project), "site", "--out", str(out))
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    assert "$3.00 of $100 spent" in page
    budget_section = page[
        page.index('<section id="budget">') : page.index(
            "</section>", page.index('<section id="budget">')
        )
    ]
    assert "<svg" in budget_section
    # $3 over 1.0 M generated tokens on the v6e; the CPU run served none.
    mtok = page[
        page.index('<table id="mtok">') : page.index("</table>", page.index('<table id="mtok">'))
    ]
    assert "tpu v6e" in mtok and "$3.00</td></tr>" in mtok.replace("\n", "")


H200 = {
    "platform": "gpu",
    "device_kind": "NVIDIA H200",
    "device_count": 1,
    "chip": "h200",
    "num_chips": 1,
    "price_per_hour": 0.0,
}


@pytest.mark.slow
def test_an_unpriced_accelerator_runs_only_when_told_and_is_never_counted_free(
    project: Path, monkeypatch
) -> None:
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    real = detection.detect_hardware
    monkeypatch.setattr(detection, "detect_hardware", lambda: {**real(), **H200})
    results = project / "results"
    args = ("--root", str(project), "run", "--claim", "fake-pass")
    assert_one_line_error(invoke(*args), "no price for h200")
    assert runs(results) == []
    result = invoke(*args, "--over-budget")
    assert result.exit_code == 0, result.output
    table = ledger.read_ledger(results)
    assert table["usd"].isna().all() and table["price_source"].tolist() == ["unpriced"]
    report = invoke("--root", str(project), "budget")
    assert "spent $0.00" in report.stdout
    assert "1 run(s) on unpriced accelerators" in report.stdout
    # Declaring the machine free (a lent one) is a price: no refusal, $0 rows.
    monkeypatch.setenv(PRICE_ENV_VAR, "0")
    assert invoke(*args).exit_code == 0
    assert ledger.read_ledger(results)["usd"].tolist()[1] == 0.0
