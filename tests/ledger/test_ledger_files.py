"""The ledger as files written once: two stores' rows merge by copying files, an earlier store's
single ledger.parquet still counts and is never rewritten, and a run is paid once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from ledger_helpers import row

from claimbench.ledger import budget, ledger


def test_two_stores_merge_by_copying_their_row_files(tmp_path: Path) -> None:
    # Two runners append on their own machines; the results branch gets both sets of files.
    a, b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    ledger.append_rows(a, [row("a1")])
    ledger.append_rows(a, [row("a2")])
    ledger.append_rows(b, [row("b1", usd=1.0)])
    for store in (a, b):
        shutil.copytree(ledger.ledger_dir(store), ledger.ledger_dir(merged), dirs_exist_ok=True)
    table = ledger.read_ledger(merged)
    assert sorted(table["run_id"]) == ["a1", "a2", "b1"]
    assert budget.budget_status(table, 100.0).spent_usd == pytest.approx(0.075 * 2 + 1.0)


def test_the_single_file_of_an_earlier_store_still_counts_and_is_not_rewritten(
    tmp_path: Path,
) -> None:
    pd.DataFrame([row("old")]).astype(ledger.COLUMNS).to_parquet(
        ledger.ledger_path(tmp_path), index=False
    )
    before = ledger.ledger_path(tmp_path).read_bytes()
    assert ledger.append_rows(tmp_path, [row("old", usd=9.0), row("new")]) == 1
    table = ledger.read_ledger(tmp_path)
    assert table["run_id"].tolist() == ["old", "new"]
    assert table.loc[table["run_id"] == "old", "usd"].item() == pytest.approx(0.075)
    assert ledger.ledger_path(tmp_path).read_bytes() == before


def test_a_run_in_two_files_is_paid_once_by_the_first(tmp_path: Path) -> None:
    # The same stored run backfilled on two machines: two files, one row counted.
    a, b = tmp_path / "a", tmp_path / "b"
    ledger.append_rows(a, [row("r", usd=1.0, source="backfill")])
    ledger.append_rows(b, [row("r", usd=1.0, source="backfill")])
    shutil.copytree(ledger.ledger_dir(b), ledger.ledger_dir(a), dirs_exist_ok=True)
    assert len(ledger.ledger_files(a)) == 2
    assert ledger.read_ledger(a)["run_id"].tolist() == ["r"]


def test_a_corrupt_row_file_is_named_and_left_as_it_is(tmp_path: Path) -> None:
    ledger.append_rows(tmp_path, [row("a")])
    bad = ledger.ledger_dir(tmp_path) / "zzz.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(ledger.LedgerError, match="zzz.parquet is not a readable ledger"):
        ledger.read_ledger(tmp_path)
    with pytest.raises(ledger.LedgerError):
        ledger.append_rows(tmp_path, [row("b")])
    assert bad.read_bytes() == b"not parquet"
    assert len(ledger.ledger_files(tmp_path)) == 2
