"""`claimbench list` and `claimbench show ID`: the claims and where each stands."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from claimbench.cli import project
from claimbench.cli.claims import score_json
from claimbench.cli.claims.evidence_options import OriginOption, SinceOption, selected_runs
from claimbench.cli.common import console, fail, global_options
from claimbench.harness import registry
from claimbench.harness.claims import find_claim
from claimbench.harness.current_scores import score_current

JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def list_claims(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List every claim: id, part, title, confidence, scope and status."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    runs = project.read_results(project.results_dir(root, None))
    scores = score_current(root, claims, runs)
    rows = [
        {
            "id": s.claim.id,
            "part": s.claim.part,
            "title": s.claim.title,
            "confidence": s.claim.confidence,
            "scope": s.claim.scope,
            "status": project.claim_status(root, s),
        }
        for s in scores
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} claims")
    for column in ("id", "part", "title", "confidence", "scope", "status"):
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "status"))
    for row in rows:
        table.add_row(*(str(row[c]) for c in row))
    console.print(table)


def show_claim(
    ctx: typer.Context,
    claim_id: Annotated[str, typer.Argument(metavar="ID", help="The claim's id.")],
    since: SinceOption = None,
    origin: OriginOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one claim: statement, prediction, what would refute it, and its evidence."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    try:
        claim = find_claim(claims, claim_id)
    except ValueError as err:
        fail(str(err))
    runs = selected_runs(project.results_dir(root, None), since, origin)
    (score,) = score_current(root, [claim], runs)
    experiment = registry.experiment_path(root, claim)
    if as_json:
        data = claim.model_dump() | score_json.score_dict(root, score)
        data["experiment_path"] = str(experiment)
        typer.echo(json.dumps(data, indent=2))
        return
    console.print(
        f"[bold]{escape(claim.id)}[/]  part {claim.part} · {escape(claim.title)}",
        markup=True,
        highlight=False,
    )
    plain = {"markup": False, "highlight": False}
    console.print(claim.statement, **plain)
    console.print(
        f"confidence {claim.confidence:g} · scope {claim.scope} · "
        f"status [bold]{escape(project.claim_status(root, score))}[/]",
        markup=True,
        highlight=False,
    )
    if claim.scope_reason:
        console.print(f"scope: {claim.scope_reason}", **plain)
    console.print(
        "prediction: "
        + "; ".join(
            f"{c}{' (analytic)' if c.basis == 'analytic' else ''}" for c in claim.prediction
        ),
        **plain,
    )
    console.print(f"refuted if: {claim.refuted_if}", **plain)
    console.print(f"experiment: {experiment.relative_to(root)}", **plain)
    for profile, params in claim.params.items():
        console.print(f"params ({profile}): {json.dumps(params)}", **plain)
    if not score.groups:
        console.print("\nno runs yet", highlight=False)
    for group in score.groups:
        scope_note = "" if group.in_scope else " (outside scope: indicative)"
        agreement = (
            f"{group.num_agree} of {len(group.current_runs)} current agree with the scored one"
            if group.scored
            else "none may be scored (see each run's reason)"
        )
        console.print(
            f"\n[bold]{escape(group.evidence)}[/] evidence{scope_note}: {len(group.runs)} run(s), "
            f"{agreement}",
            markup=True,
            highlight=False,
        )
        for run in group.runs:
            role = "scored" if run is group.scored else ("current" if run.current else "earlier")
            note = "" if run.current else f" ({run.exclusion}, not scored)"
            console.print(
                f"  {run.run_id} [{role}] {run.verdict}{note} · {score_json.run_label(run.info)}",
                **plain,
            )
            if run is group.scored:
                for cs in run.conditions:
                    if cs.status != "other-basis":
                        console.print(
                            f"    {cs.condition}: {score_json.format_estimate(cs)} "
                            f"over {cs.num_trials} trial(s) from {cs.evidence} -> {cs.status}",
                            **plain,
                        )
