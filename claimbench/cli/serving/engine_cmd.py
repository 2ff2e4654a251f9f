"""`claimbench engine knobs`: which engine options an operator may change at runtime."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from claimbench.cli.common import console

app = typer.Typer(help="The serving engine's configuration.", no_args_is_help=True)


@app.command("knobs")
def knobs(
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.")
    ] = False,
) -> None:
    """List every engine option and whether it can change at runtime (the engine is emptied
    and keeps its compiled steps and KV pool: policies, tenants' quotas and limits, ...) or
    needs a new engine (it shapes the compiled steps, the weights or the pool)."""
    from claimbench.engine.config import knob_rows

    rows = knob_rows()
    if json_output:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="engine options")
    for column in ("option", "default", "changes", "what it controls"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], str(row["default"]), row["changes"], row["description"])
    console.print(table)
