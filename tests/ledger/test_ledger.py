"""The ledger: append-only and atomic rows, prices with their source, tokens served, estimates,
the refusal rule and dollars per million tokens (library level; the CLI is test_budget_cmd.py)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pandas as pd
import pytest
from ledger_helpers import row

from claimbench.hardware.chips import PRICE_ENV_VAR
from claimbench.harness.claims import ClaimsError, load_claims
from claimbench.harness.project_config import BudgetSettings, DeclaredPrice, load_project_config
from claimbench.ledger import budget, ledger
from claimbench.ledger.prices import (
    CPU_SOURCE,
    TPU_PRICING_URL,
    MachinePrice,
    UnpricedError,
    machine_price,
)

V6E_X4 = {"platform": "tpu", "chip": "v6e", "device_kind": "TPU v6 lite", "num_chips": 4}
CPU = {"platform": "cpu", "chip": None, "device_kind": "cpu", "num_chips": 1}
V6E_PRICE = MachinePrice(2.70, 1, TPU_PRICING_URL, "2026-11-29")


def store_run(results_dir: Path, run_id: str, hardware: dict, wall_s: float, requests) -> Path:
    """A minimal stored run directory: meta.json and requests.parquet are what the ledger reads."""
    run_dir = results_dir / "runs" / run_id
    run_dir.mkdir(parents=True)
    meta = {
        "run_id": run_id,
        "claim": "kv-int8",
        "profile": "full",
        "trials": 5,
        "start": "2026-11-30T01:00:00+00:00",
        "end": "2026-11-30T01:10:00+00:00",
        "hardware": hardware,
        "wall_s": wall_s,
        "device_s": 0.0 if hardware["platform"] == "cpu" else wall_s,
        "price_per_hour": 0.0,
    }
    (run_dir / "meta.json").write_text(json.dumps(meta))
    requests.to_parquet(run_dir / "requests.parquet", index=False)
    return run_dir


# Four requests: r3 was rejected at ingress (never scheduled), r2 was preempted mid-output.
REQUESTS = pd.DataFrame(
    {
        "request_id": ["r0", "r1", "r2", "r3"],
        "first_scheduled_s": [0.0, 0.1, 0.2, None],
        "prompt_tokens": [10, 20, 30, 40],
        "output_tokens": [5, 6, 7, 0],
    }
)


def test_tokens_served_counts_scheduled_prompts_and_every_generated_token() -> None:
    # prompts 10 + 20 + 30 (r3's 40 never reached the engine); outputs 5 + 6 + 7.
    assert ledger.tokens_served(REQUESTS) == (60, 18)
    assert ledger.tokens_served(pd.DataFrame()) == (0, 0)


def test_cpu_run_costs_nothing_but_logs_its_seconds(tmp_path: Path) -> None:
    run_dir = store_run(tmp_path, "r-cpu", CPU, 42.5, REQUESTS)
    got = ledger.row_for_run(run_dir, machine_price(CPU, {}))
    assert got["device_s"] == 42.5 and got["usd"] == 0.0
    assert (got["hardware_class"], got["chip"], got["price_source"]) == ("cpu", "cpu", CPU_SOURCE)
    assert (got["prompt_tokens"], got["output_tokens"], got["trials"]) == (60, 18, 5)


def test_tpu_run_is_priced_per_chip_hour_with_source_and_date(tmp_path: Path) -> None:
    run_dir = store_run(tmp_path, "r-tpu", V6E_X4, 900.0, REQUESTS)
    got = ledger.row_for_run(run_dir, machine_price(V6E_X4, {}))
    # 900 s = 0.25 h of 4 chips at $2.70 per chip-hour.
    assert got["usd"] == pytest.approx(0.25 * 4 * 2.70)
    assert (got["chip"], got["num_chips"], got["usd_per_chip_hour"]) == ("v6e", 4, 2.70)
    assert got["price_source"] == TPU_PRICING_URL and got["price_as_of"] == "2026-11-29"


def test_prices_declared_and_environment_override_the_list(monkeypatch) -> None:
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    declared = {
        "v6e": DeclaredPrice(usd_per_chip_hour=1.5, source="committed use", as_of=date(2026, 11, 1))
    }
    price = machine_price(V6E_X4, declared)
    assert (price.usd_per_hour, price.as_of) == (6.0, "2026-11-01")
    assert "claims.yaml" in price.source and "committed use" in price.source
    monkeypatch.setenv(PRICE_ENV_VAR, "10")
    price = machine_price(V6E_X4, declared)
    assert price.usd_per_hour == pytest.approx(10.0) and PRICE_ENV_VAR in price.source
    assert machine_price(CPU, declared).usd_per_hour == 0.0  # a CPU is never metered


def test_an_unpriced_accelerator_is_an_error_not_free(monkeypatch) -> None:
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    h100 = {
        "platform": "gpu",
        "chip": "h100",
        "device_kind": "NVIDIA H100 80GB HBM3",
        "num_chips": 1,
    }
    with pytest.raises(UnpricedError, match="no price for h100"):
        machine_price(h100, {})


def test_append_keeps_every_earlier_row_and_pays_each_run_once(tmp_path: Path) -> None:
    assert ledger.append_rows(tmp_path, [row("a"), row("b")]) == 2
    assert ledger.append_rows(tmp_path, [row("b", usd=99.0), row("c")]) == 1
    table = ledger.read_ledger(tmp_path)
    assert table["run_id"].tolist() == ["a", "b", "c"]
    assert table.loc[table["run_id"] == "b", "usd"].item() == pytest.approx(0.075)
    assert sorted(p.name for p in tmp_path.iterdir()) == [ledger.LOCK_FILE, ledger.LEDGER_DIR]
    assert len(ledger.ledger_files(tmp_path)) == 2  # one file per append, none rewritten


def test_a_failed_write_leaves_the_old_ledger_and_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    ledger.append_rows(tmp_path, [row("a")])
    before = {p.name: p.read_bytes() for p in ledger.ledger_dir(tmp_path).iterdir()}

    def broken(self, path, **kwargs):
        Path(path).write_bytes(b"half a parquet file")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", broken)
    with pytest.raises(OSError, match="disk full"):
        ledger.append_rows(tmp_path, [row("b")])
    assert {p.name: p.read_bytes() for p in ledger.ledger_dir(tmp_path).iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [ledger.LOCK_FILE, ledger.LEDGER_DIR]


def test_a_corrupt_ledger_is_reported_and_never_rewritten(tmp_path: Path) -> None:
    ledger.ledger_path(tmp_path).write_bytes(b"not parquet")
    with pytest.raises(ledger.LedgerError, match="not a readable ledger"):
        ledger.read_ledger(tmp_path)
    with pytest.raises(ledger.LedgerError):
        ledger.append_rows(tmp_path, [row("a")])
    assert ledger.ledger_path(tmp_path).read_bytes() == b"not parquet"


def test_estimate_uses_earlier_runs_on_the_same_chip_else_the_declared_seconds() -> None:
    table = pd.DataFrame(
        [
            row("a", device_s=300.0, trials=3),  # 100 s per trial
            row("b", device_s=500.0, trials=5),  # 100 s per trial
            row("c", device_s=9000.0, trials=3, chip="v5e"),  # another chip: ignored
            row("d", device_s=9000.0, trials=3, claim_id="other"),  # another claim: ignored
        ]
    ).astype(ledger.COLUMNS)
    settings = BudgetSettings(estimate_device_s={"full": {"default": 1000, "new-claim": 360}})
    kwargs = dict(hardware_class="tpu", chip="v6e", price=V6E_PRICE, profile_trials=10)
    measured = budget.estimate_run(table, "kv-int8", "full", trials=4, settings=settings, **kwargs)
    assert measured.basis == "ledger (2 runs)" and measured.device_s == pytest.approx(400.0)
    assert measured.usd == pytest.approx(400 / 3600 * 2.70)
    # Declared seconds stand for the profile's 10 trials: 5 trials take half.
    declared = budget.estimate_run(
        table, "new-claim", "full", trials=5, settings=settings, **kwargs
    )
    assert (declared.basis, declared.device_s) == ("declared", pytest.approx(180.0))
    fallback = budget.estimate_run(
        table, "unlisted", "full", trials=10, settings=settings, **kwargs
    )
    assert fallback.device_s == pytest.approx(1000.0)
    none = budget.estimate_run(table, "x", "quick", trials=3, settings=settings, **kwargs)
    assert (none.usd, none.basis) == (None, "none")


def test_refusal_names_the_estimate_and_the_remaining_budget() -> None:
    status = budget.BudgetStatus(budget_usd=100.0, spent_usd=99.5, num_runs=40, device_s=1.0)
    fits = [budget.Estimate("a", 600.0, 0.45, "declared")]
    assert budget.refusal(fits, status, V6E_PRICE) is None
    over = [
        budget.Estimate("a", 600.0, 0.45, "declared"),
        budget.Estimate("b", 600.0, 0.45, "declared"),
    ]
    reason = budget.refusal(over, status, V6E_PRICE)
    assert "$0.90" in reason and "$0.50" in reason and "--over-budget" in reason
    unknown = [budget.Estimate("b", None, None, "none")]
    assert "no cost estimate for b" in budget.refusal(unknown, status, V6E_PRICE)
    # Unmetered work always fits, even past the budget.
    cpu = MachinePrice(0.0, 1, CPU_SOURCE, "")
    broke = budget.BudgetStatus(budget_usd=100.0, spent_usd=120.0, num_runs=40, device_s=1.0)
    assert budget.refusal(unknown, broke, cpu) is None


def test_dollars_per_million_tokens_at_the_measured_utilization() -> None:
    table = pd.DataFrame(
        [
            row("a", usd=1.0, device_s=1000.0, output_tokens=400_000),
            row("b", usd=2.0, device_s=2000.0, output_tokens=600_000),
            row("c", claim_id="analytic", usd=0.5, output_tokens=0),
        ]
    ).astype(ledger.COLUMNS)
    got = budget.per_mtok_table(table).set_index("claim_id")
    # $3 for 1.0 M tokens over 3000 s: $3/Mtok at 333 tokens/s.
    assert got.loc["kv-int8", "usd_per_mtok"] == pytest.approx(3.0)
    assert got.loc["kv-int8", "tokens_per_s"] == pytest.approx(1e6 / 3000)
    assert pd.isna(got.loc["analytic", "usd_per_mtok"])
    status = budget.budget_status(table, 100.0)
    assert (status.spent_usd, status.remaining_usd) == (pytest.approx(3.5), pytest.approx(96.5))


SETTINGS_HEAD = """\
budget: {usd: 25, estimate_device_s: {full: {default: 60}}}
full_profile:
  model: {repo: Qwen/Qwen2.5-7B-Instruct, revision: REVISION}
claims:
- id: only
  part: 1
  title: T
  statement: S
  confidence: 0.5
  scope: any
  prediction:
    - {metric: m, op: ">=", value: 1.0}
  refuted_if: R
"""


def test_settings_beside_the_claims(tmp_path: Path) -> None:
    (tmp_path / "claims.yaml").write_text(SETTINGS_HEAD.replace("REVISION", "a" * 40))
    assert [c.id for c in load_claims(tmp_path)] == ["only"]
    config = load_project_config(tmp_path)
    assert config.budget.usd == 25 and config.full_profile.model.revision == "a" * 40
    (tmp_path / "claims.yaml").write_text(SETTINGS_HEAD.replace("REVISION", "main"))
    with pytest.raises(ClaimsError, match="full_profile.model.revision.*40-hex"):
        load_project_config(tmp_path)
    (tmp_path / "claims.yaml").write_text(
        "budgte: {usd: 5}\n" + SETTINGS_HEAD.replace("REVISION", "a" * 40)
    )
    with pytest.raises(ClaimsError, match="unknown top-level key"):
        load_claims(tmp_path)


def test_a_ledger_with_a_mistyped_column_is_reported(tmp_path: Path) -> None:
    frame = pd.DataFrame([row("a")]).astype(ledger.COLUMNS).assign(usd="three dollars")
    frame.to_parquet(ledger.ledger_path(tmp_path), index=False)
    with pytest.raises(ledger.LedgerError, match="wrong type"):
        ledger.read_ledger(tmp_path)


def test_overspent_budget_prints_a_negative_amount() -> None:
    assert budget.fmt_usd(-5.0) == "-$5.00" and budget.fmt_usd(1234.5) == "$1,234.50"


def test_backfilled_runs_keep_the_price_they_were_stored_with(monkeypatch) -> None:
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    h200 = {"platform": "gpu", "chip": "h200", "device_kind": "NVIDIA H200", "num_chips": 1}
    start = "2026-11-30T23:55:11+00:00"
    old_tpu = {"hardware": V6E_X4, "price_per_hour": 8.0, "start": start}
    price = ledger.backfill_price(old_tpu, {})
    assert (price.usd_per_hour, price.as_of) == (8.0, "2026-11-30")  # not today's 4 x $2.70
    # Stored unpriced: its dollars are unknown (NaN), never $0.
    gone = ledger.backfill_price({"hardware": h200, "price_per_hour": 0.0, "start": start}, {})
    assert not gone.priced and gone.source == "unpriced"
