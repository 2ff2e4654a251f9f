"""`claimbench score`: verdicts and calibration from the stored runs -> results/scores.parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from claimbench.cli import project
from claimbench.cli.claims import score_json
from claimbench.cli.claims.evidence_options import OriginOption, SinceOption, selected_runs
from claimbench.cli.common import console, global_options
from claimbench.harness import results, scoring
from claimbench.ops import service

VERDICT_STYLE = {
    "confirmed": "green",
    "refuted": "red",
    "inconclusive": "yellow",
    "indicative-only": "cyan",
    "not-run": "dim",
}


def _evidence_cell(s: scoring.ClaimScore) -> str:
    """Where the row's values come from, and the replications behind them."""
    not_scored = [f"{n} run(s) {reason}, not scored" for reason, n in s.exclusion_counts().items()]
    if s.shown is None:
        return "\n".join(["-", *not_scored])
    lines = [s.shown.evidence + ("" if s.headline or s.shown.in_scope else " (indicative)")]
    lines.append(score_json.run_label(s.shown.info))
    group = s.group(s.shown.evidence)
    if group is not None:
        lines.append(f"{group.num_agree} of {len(group.current_runs)} current run(s) agree")
    lines.extend(f"{g.evidence} (in scope) says {g.scored.verdict}" for g in s.disagreements)
    lines.extend(not_scored)
    return "\n".join(lines)


def _condition_line(cs: scoring.ConditionScore) -> str:
    basis = "analytic" if cs.condition.basis == "analytic" else "measured"
    source = cs.evidence or "none"
    if cs.evidence and not cs.in_scope:
        source += f", indicative: {cs.scope_note}" if cs.scope_note else ", indicative"
    status = cs.status
    if status == "too-few-trials":
        status += f" ({cs.num_trials} of {cs.min_trials})"
    if cs.control_values:
        status += f" (control fired in {cs.num_control_fired} of {cs.num_trials} trials)"
    return f"{cs.condition} ({basis}): {score_json.format_estimate(cs)} from {source} -> {status}"


def score(
    ctx: typer.Context,
    results_dir: Annotated[
        Path | None, typer.Option(help="Results store (default: <root>/results).")
    ] = None,
    since: SinceOption = None,
    origin: OriginOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Score every claim from the stored runs; write results/scores.parquet."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    store = project.results_dir(root, results_dir)
    runs = selected_runs(store, since, origin)
    scored, path = service.score_and_write(root, store, claims, runs)
    scores, cal, counts = scored.scores, scored.calibration, scored.totals
    if as_json:
        data = {
            "claims": [score_json.score_dict(root, s) for s in scores],
            "calibration": score_json.calibration_dict(cal),
            "totals": counts,
            "num_runs": len(runs),
            "selection": {"since": since, "origin": origin},
            "cost_usd": results.total_cost_usd(runs),
            "scores_path": str(path),
        }
        typer.echo(json.dumps(data, indent=2))
        return

    table = Table(title=f"claims scored from {len(runs)} run(s)")
    for column in ("id", "conf", "scope", "verdict", "evidence", "conditions (basis): estimate"):
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "verdict"))
    for s in scores:
        style = VERDICT_STYLE[s.verdict]
        table.add_row(
            s.claim.id,
            f"{s.claim.confidence:g}",
            s.claim.scope,
            Text(s.verdict, style=style),
            _evidence_cell(s),
            "\n".join(_condition_line(cs) for cs in s.conditions) if s.shown else "-",
        )
    console.print(table)
    console.print(scored.summary(), highlight=False)
    if cal.num_decided:
        console.print(
            f"calibration over {cal.num_decided} claim(s) decided in scope: "
            f"Brier {cal.brier:.3f} [{cal.brier_ci[0]:.3f}, {cal.brier_ci[1]:.3f}] "
            f"(coin {cal.coin_brier:.2f}, lower is better) · log score {cal.log_score:.3f} "
            f"[{cal.log_score_ci[0]:.3f}, {cal.log_score_ci[1]:.3f}] "
            f"(coin {cal.coin_log_score:.3f}, higher is better)",
            highlight=False,
        )
    else:
        console.print("calibration: no claims decided in scope yet", highlight=False)
    console.print(f"wrote {path}", highlight=False, markup=False)
