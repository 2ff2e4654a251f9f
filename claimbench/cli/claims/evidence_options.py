"""`--since` and `--origin`: which stored runs `score`, `site` and `show` count."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli import project
from claimbench.cli.common import fail
from claimbench.harness import selection
from claimbench.harness.results import StoredRun

SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="DATE",
        help="Count only runs that ended on or after DATE (YYYY-MM-DD, UTC, or an ISO time).",
    ),
]
OriginOption = Annotated[
    str | None,
    typer.Option(
        "--origin",
        metavar="NAME",
        help="Count only runs from NAME (the host name, or CLAIMBENCH_ORIGIN when set).",
    ),
]


def selected_runs(store: Path, since: str | None, origin: str | None) -> list[StoredRun]:
    """The stored runs under ``store`` that the options select; a bad date exits 2."""
    try:
        since_time = selection.parse_since(since) if since is not None else None
    except ValueError as err:
        fail(str(err))
    return selection.select_runs(project.read_results(store), since=since_time, origin=origin)
