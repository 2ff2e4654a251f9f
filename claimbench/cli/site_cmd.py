"""`claimbench site`: render the self-contained scoreboard (site/index.html + claim pages)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli import project
from claimbench.cli.budget_cmd import open_ledger, open_project_config
from claimbench.cli.common import console, fail, global_options
from claimbench.cli.evidence_options import OriginOption, SinceOption, selected_runs


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
    from claimbench.lab.peers import read_peers
    from claimbench.site.render import render_site

    root = global_options(ctx).root
    claims = project.open_claims(root)
    runs = selected_runs(project.results_dir(root, results_dir), since, origin)
    out_dir = (out if out is not None else root / project.SITE_DIR).resolve()
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"--out {out_dir} exists and is not a directory")
    # The whole ledger, whatever --since/--origin select: spend is the project's.
    store = project.results_dir(root, results_dir)
    spend = open_ledger(store)
    budget_usd = open_project_config(root).budget.usd
    index = render_site(
        root,
        claims,
        runs,
        out_dir,
        ledger=spend,
        budget_usd=budget_usd,
        peer_records=read_peers(store),
    )
    console.print(
        f"wrote {index} and {len(claims)} claim pages from {len(runs)} run(s)",
        highlight=False,
        markup=False,
    )
