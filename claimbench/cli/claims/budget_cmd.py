"""`claimbench budget`: spent and remaining against the budget, and $/Mtok per claim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from claimbench.cli import project
from claimbench.cli.common import console, fail, global_options
from claimbench.harness.claims import ClaimsError
from claimbench.harness.project_config import ProjectConfig, load_project_config
from claimbench.ledger.budget_report import TABLE_HEADERS
from claimbench.ops import service


def open_project_config(root: Path) -> ProjectConfig:
    """claims.yaml's settings, or exit 2 with one line."""
    try:
        return load_project_config(root)
    except ClaimsError as err:
        fail(str(err))


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
    """Dollars spent (results/ledger/) against the budget in claims.yaml, and dollars per
    million generated tokens per claim and hardware."""
    opts = global_options(ctx)
    # A store not made yet has spent nothing: the nightly asks before its first run.
    store = project.results_dir(opts.root, results_dir, must_exist=False)
    try:
        report = service.budget(opts.root, store, backfill=backfill)
    except service.ServiceError as err:  # a corrupt ledger is left as it is
        fail(str(err))
    if as_json:
        print(json.dumps(report.to_json(), indent=2, default=int))
        return
    if report.backfilled is not None:
        console.print(f"backfilled {report.backfilled} run(s) into {report.ledger_file}")
    console.print(report.headline(), highlight=False)
    rows = report.table_rows()
    if rows:
        out = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for header in TABLE_HEADERS:
            out.add_column(header, justify="left" if header in ("claim", "hardware") else "right")
        for row in rows:
            out.add_row(*row)
        console.print(out)
    for line in report.notes():
        console.print(line, highlight=False)
