"""`claimbench audit`: show the MCP audit log and verify its hash chain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.common import console, fail, global_options
from claimbench.ops.audit import DEFAULT_LOG, read_lines, verify


def audit(
    ctx: typer.Context,
    log: Annotated[
        Path | None, typer.Option(help=f"The audit log (default: <root>/{DEFAULT_LOG}).")
    ] = None,
    tail: Annotated[int, typer.Option(help="Show the last N calls (0: none).", min=0)] = 20,
    check: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Verify the hash chain: exit 1 naming the first line edited, deleted or inserted.",
        ),
    ] = False,
) -> None:
    """Show the last calls agents made through `claimbench mcp`, allowed or refused."""
    path = log if log is not None else global_options(ctx).root / DEFAULT_LOG
    try:
        lines = read_lines(path)
    except OSError as e:
        fail(f"cannot read audit log {path}: {e.strerror}")
    for line in lines[len(lines) - tail :] if tail else []:
        try:
            entry = json.loads(line)
            arguments = json.dumps(entry.get("arguments"), separators=(",", ":"))
            text = (
                f"{entry.get('time')}  {entry.get('agent') or '-'}  {entry.get('tool')}"
                f"{arguments}  {entry.get('outcome')}"
                + (f"  job {entry['job_id']}" if entry.get("job_id") else "")
            )
        except (ValueError, AttributeError):
            text = f"(unreadable line) {line[:120]!r}"
        console.print(text, highlight=False, markup=False, soft_wrap=True)
    if not check:
        return
    verdict = verify(path)
    if not verdict.ok:
        fail(f"{path} line {verdict.broken_line}: {verdict.reason}", code=1)
    console.print(f"{path}: chain intact over {verdict.num_lines} line(s)", highlight=False)
