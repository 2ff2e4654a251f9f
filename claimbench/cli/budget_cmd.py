"""`claimbench budget`: spent and remaining against the budget, and $/Mtok per claim."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich import box
from rich.table import Table

from claimbench.cli import project
from claimbench.cli.common import console, fail, global_options
from claimbench.harness.claims import ClaimsError
from claimbench.harness.project_config import ProjectConfig, load_project_config
from claimbench.ledger import budget, ledger
from claimbench.ledger.prices import UnpricedError


def open_project_config(root: Path) -> ProjectConfig:
    """claims.yaml's settings, or exit 2 with one line."""
    try:
        return load_project_config(root)
    except ClaimsError as err:
        fail(str(err))


def open_ledger(store: Path) -> pd.DataFrame:
    """The ledger's rows, or exit 2 with one line (a corrupt ledger is left as it is)."""
    try:
        return ledger.read_ledger(store)
    except ledger.LedgerError as err:
        fail(str(err))


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def budget_command(
    ctx: typer.Context,
    results_dir: Annotated[
        Path | None, typer.Option(help="Results store (default: <root>/results).")
    ] = None,
    backfill: Annotated[
        bool,
        typer.Option(
            help="First add the stored runs the ledger lacks (runs older than the ledger), "
            "priced from their meta.json."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Dollars spent (results/ledger.parquet) against the budget in claims.yaml, and dollars per
    million generated tokens per claim and hardware."""
    opts = global_options(ctx)
    config = open_project_config(opts.root)
    store = project.results_dir(opts.root, results_dir)
    if backfill:
        try:
            added = ledger.backfill(store, config.budget.prices)
        except (ledger.LedgerError, UnpricedError) as err:
            fail(str(err))
        if not as_json:
            console.print(f"backfilled {added} run(s) into {ledger.ledger_path(store)}")
    rows = open_ledger(store)
    status = budget.budget_status(rows, config.budget.usd)
    missing = [path.name for path in ledger.missing_runs(store, rows)]
    table = budget.per_mtok_table(rows)
    if as_json:
        per_claim = [
            {
                key: (_number(value) if isinstance(value, float) else value)
                for key, value in record.items()
            }
            for record in table.to_dict(orient="records")
        ]
        report = {
            "budget_usd": status.budget_usd,
            "spent_usd": status.spent_usd,
            "remaining_usd": status.remaining_usd,
            "num_runs": status.num_runs,
            "device_s": status.device_s,
            "num_unpriced": status.num_unpriced,
            "unpriced_device_s": status.unpriced_device_s,
            "ledger": str(ledger.ledger_path(store)),
            "runs_not_in_ledger": missing,
            "per_claim": per_claim,
        }
        print(json.dumps(report, indent=2, default=int))
        return
    console.print(
        f"budget {budget.fmt_usd(status.budget_usd)}  spent {budget.fmt_usd(status.spent_usd)}  "
        f"remaining {budget.fmt_usd(status.remaining_usd)}  "
        f"({status.num_runs} run(s) in the ledger, {status.device_s:,.0f} device-seconds)",
        highlight=False,
    )
    if len(table):
        out = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for header in ("claim", "hardware", "runs", "device-s", "spent", "tokens", "tok/s"):
            out.add_column(header, justify="left" if header in ("claim", "hardware") else "right")
        out.add_column("$/Mtok", justify="right")
        for r in table.itertuples():
            out.add_row(
                r.claim_id,
                r.chip if r.hardware_class == r.chip else f"{r.hardware_class} {r.chip}",
                str(r.num_runs),
                f"{r.device_s:,.0f}",
                budget.fmt_usd(r.usd),
                f"{r.output_tokens:,}",
                "-" if math.isnan(r.tokens_per_s) else f"{r.tokens_per_s:,.0f}",
                budget.fmt_usd(r.usd_per_mtok),
            )
        console.print(out)
    if status.num_unpriced:
        console.print(
            f"{status.num_unpriced} run(s) on unpriced accelerators "
            f"({status.unpriced_device_s:,.0f} device-seconds) are not in the spend",
            highlight=False,
        )
    if missing:
        console.print(
            f"{len(missing)} stored run(s) are not in the ledger (stored before it); "
            "`claimbench budget --backfill` adds them from their meta.json",
            highlight=False,
        )
