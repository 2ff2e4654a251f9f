"""`claimbench site`: render the self-contained scoreboard (site/index.html + claim pages)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli import project
from claimbench.cli.claims.evidence_options import OriginOption, SinceOption, selected_runs
from claimbench.cli.common import console, fail, global_options
from claimbench.ops import service


def site(
    ctx: typer.Context,
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default: <root>/site).")
    ] = None,
    results_dir: Annotated[
        Path | None, typer.Option(help="Results store (default: <root>/results).")
    ] = None,
    since: SinceOption = None,
    origin: OriginOption = None,
) -> None:
    """Render the scoreboard from the stored runs; open index.html from disk or publish it."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    runs = selected_runs(project.results_dir(root, results_dir), since, origin)
    out_dir = (out if out is not None else root / project.SITE_DIR).resolve()
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"--out {out_dir} exists and is not a directory")
    # The whole ledger, whatever --since/--origin select: spend is the project's.
    store = project.results_dir(root, results_dir)
    try:
        built = service.build_site(root, store, claims, runs, out_dir)
    except service.ServiceError as err:
        fail(str(err))
    console.print(
        f"wrote {built.index} and {built.num_claims} claim pages from {built.num_runs} run(s)",
        highlight=False,
        markup=False,
    )
