"""`claimbench list` and `claimbench show ID`: the claims and where each stands."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from claimbench.cli import project
from claimbench.cli.common import console, fail, global_options
from claimbench.harness import registry, scoring
from claimbench.harness.claims import find_claim

JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def list_claims(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List every claim: id, part, title, confidence, scope and status."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    runs = project.read_results(project.results_dir(root, None))
    scores = scoring.score_claims(claims, runs)
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
        table.add_row(*(escape(str(row[c])) for c in row))
    console.print(table)


def show_claim(
    ctx: typer.Context,
    claim_id: Annotated[str, typer.Argument(metavar="ID", help="The claim's id.")],
    as_json: JsonOption = False,
) -> None:
    """Show one claim: statement, prediction, what would refute it, and its evidence."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    try:
        claim = find_claim(claims, claim_id)
    except ValueError as err:
        fail(str(err))
    runs = project.read_results(project.results_dir(root, None))
    score = scoring.score_claim(claim, runs)
    experiment = registry.experiment_path(root, claim)
    if as_json:
        data = claim.model_dump() | project.score_dict(root, score)
        data["experiment_path"] = str(experiment)
        typer.echo(json.dumps(data, indent=2))
        return
    console.print(
        f"[bold]{claim.id}[/]  part {claim.part} · {escape(claim.title)}", highlight=False
    )
    console.print(claim.statement, markup=False, highlight=False)
    console.print(
        f"confidence {claim.confidence:g} · scope {claim.scope} · "
        f"status [bold]{project.claim_status(root, score)}[/]",
        highlight=False,
    )
    plain = {"markup": False, "highlight": False}
    console.print("prediction: " + "; ".join(str(c) for c in claim.prediction), **plain)
    console.print(f"refuted if: {claim.refuted_if}", **plain)
    console.print(f"experiment: {experiment.relative_to(root)}", **plain)
    for profile, params in claim.params.items():
        console.print(f"params ({profile}): {json.dumps(params)}", **plain)
    if not score.groups:
        console.print("\nno runs yet", highlight=False)
    for group in score.groups:
        scope_note = "" if group.in_scope else " (outside scope: indicative)"
        console.print(
            f"\n[bold]{group.evidence}[/] evidence{scope_note}: {group.verdict} "
            f"· run {group.run_id} · profile {group.profile}",
            highlight=False,
        )
        for cs in group.conditions:
            console.print(
                f"  {cs.condition}: {project.format_estimate(cs)} "
                f"over {cs.num_trials} trials -> {cs.status}",
                **plain,
            )
