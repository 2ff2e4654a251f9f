"""`claimbench score`: verdicts and calibration from the stored runs -> results/scores.parquet."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from claimbench.cli import project
from claimbench.cli.common import console, global_options
from claimbench.harness import results, scoring

VERDICT_STYLE = {
    "confirmed": "green",
    "refuted": "red",
    "inconclusive": "yellow",
    "indicative-only": "cyan",
    "not-run": "dim",
}


def _write_scores(store: Path, scores: list[scoring.ClaimScore]) -> Path:
    """scores.parquet, replaced atomically so a reader never sees half a file."""
    store.mkdir(parents=True, exist_ok=True)
    path = store / results.SCORES_FILE
    tmp = store / f"{results.TMP_PREFIX}{results.SCORES_FILE}"
    try:
        scoring.scores_frame(scores).to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def score(
    ctx: typer.Context,
    results_dir: Annotated[
        Path | None, typer.Option(help="Results store (default: <root>/results).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Score every claim from the stored runs; write results/scores.parquet."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    store = project.results_dir(root, results_dir)
    runs = project.read_results(store)
    scores = scoring.score_claims(claims, runs)
    cal = scoring.calibration(scores)
    path = _write_scores(store, scores)
    counts = scoring.verdict_counts(scores)
    if as_json:
        data = {
            "claims": [project.score_dict(root, s) for s in scores],
            "calibration": project.calibration_dict(cal),
            "totals": counts,
            "cost_usd": results.total_cost_usd(runs),
            "scores_path": str(path),
        }
        typer.echo(json.dumps(data, indent=2))
        return

    table = Table(title=f"claims scored from {len(runs)} run(s)")
    for column in ("id", "conf", "scope", "verdict", "evidence", "estimate [95% CI] vs prediction"):
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "verdict"))
    for s in scores:
        style = VERDICT_STYLE[s.verdict]
        shown = s.headline or (s.groups[0] if s.groups else None)
        lines = [
            f"{escape(str(cs.condition))}: {project.format_estimate(cs)}"
            for cs in (shown.conditions if shown else ())
        ]
        table.add_row(
            s.claim.id,
            f"{s.claim.confidence:g}",
            s.claim.scope,
            f"[{style}]{s.verdict}[/]",
            shown.evidence if shown else "-",
            "\n".join(lines) or "-",
        )
    console.print(table)
    console.print(" · ".join(f"{n} {verdict}" for verdict, n in counts.items()), highlight=False)
    if cal.num_decided:
        console.print(
            f"calibration over {cal.num_decided} decided claim(s): Brier {cal.brier:.3f} "
            f"(coin {cal.coin_brier:.2f}, lower is better) · log score {cal.log_score:.3f} "
            f"(coin {scoring.COIN_LOG_SCORE:.3f}, higher is better)",
            highlight=False,
        )
    else:
        console.print("calibration: no decided claims yet", highlight=False)
    console.print(f"wrote {path}", highlight=False, markup=False)
