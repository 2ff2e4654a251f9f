"""What `claimbench budget` shows: spend against the budget, $/Mtok per claim, the stored runs
the ledger lacks, as one report read from a results store."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from claimbench.harness.project_config import DeclaredPrice
from claimbench.ledger import budget, ledger

# The per-claim table's columns as printed, after the claim and hardware.
TABLE_HEADERS = ("claim", "hardware", "runs", "device-s", "spent", "tokens", "tok/s", "$/Mtok")


@dataclass(frozen=True)
class BudgetReport:
    """The ledger's spend, its per-claim table and the runs it lacks."""

    status: budget.BudgetStatus
    ledger_file: Path
    per_claim: pd.DataFrame  # budget.per_mtok_table's columns
    missing_runs: list[str]  # stored run ids with no ledger row (stored before the ledger)
    backfilled: int | None = None  # runs added by a backfill first; None: none asked for

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values (NaN as null)."""
        status = self.status
        per_claim = [
            {k: (_number(v) if isinstance(v, float) else v) for k, v in record.items()}
            for record in self.per_claim.to_dict(orient="records")
        ]
        return {
            "budget_usd": status.budget_usd,
            "spent_usd": status.spent_usd,
            "remaining_usd": status.remaining_usd,
            "num_runs": status.num_runs,
            "device_s": status.device_s,
            "num_unpriced": status.num_unpriced,
            "unpriced_device_s": status.unpriced_device_s,
            "ledger": str(self.ledger_file),
            "runs_not_in_ledger": self.missing_runs,
            "per_claim": per_claim,
        }

    def headline(self) -> str:
        """The one line of budget, spent and remaining."""
        s = self.status
        return (
            f"budget {budget.fmt_usd(s.budget_usd)}  spent {budget.fmt_usd(s.spent_usd)}  "
            f"remaining {budget.fmt_usd(s.remaining_usd)}  "
            f"({s.num_runs} run(s) in the ledger, {s.device_s:,.0f} device-seconds)"
        )

    def table_rows(self) -> list[tuple[str, ...]]:
        """The per-claim table's rows as printed, one string per TABLE_HEADERS column."""
        return [
            (
                r.claim_id,
                r.chip if r.hardware_class == r.chip else f"{r.hardware_class} {r.chip}",
                str(r.num_runs),
                f"{r.device_s:,.0f}",
                budget.fmt_usd(r.usd),
                f"{r.output_tokens:,}",
                "-" if math.isnan(r.tokens_per_s) else f"{r.tokens_per_s:,.0f}",
                budget.fmt_usd(r.usd_per_mtok),
            )
            for r in self.per_claim.itertuples()
        ]

    def notes(self) -> list[str]:
        """The lines after the table: unpriced runs left out of the spend, runs not in it."""
        lines = []
        if self.status.num_unpriced:
            lines.append(
                f"{self.status.num_unpriced} run(s) on unpriced accelerators "
                f"({self.status.unpriced_device_s:,.0f} device-seconds) are not in the spend"
            )
        if self.missing_runs:
            lines.append(
                f"{len(self.missing_runs)} stored run(s) are not in the ledger (stored before "
                "it); `claimbench budget --backfill` adds them from their meta.json"
            )
        return lines


def budget_report(
    store: Path,
    budget_usd: float,
    prices: dict[str, DeclaredPrice],
    *,
    backfill: bool = False,
) -> BudgetReport:
    """Read ``store``'s ledger (after adding the runs it lacks when ``backfill``, priced from
    their meta.json with ``prices``) into a report against ``budget_usd``.

    ledger.LedgerError for a corrupt ledger (left as it is), prices.UnpricedError for a
    backfilled run with no price."""
    added = ledger.backfill(store, prices) if backfill else None
    rows = ledger.read_ledger(store)
    return BudgetReport(
        status=budget.budget_status(rows, budget_usd),
        ledger_file=ledger.ledger_dir(store),
        per_claim=budget.per_mtok_table(rows),
        missing_runs=[path.name for path in ledger.missing_runs(store, rows)],
        backfilled=added,
    )


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value
