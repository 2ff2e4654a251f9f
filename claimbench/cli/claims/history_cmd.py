"""`claimbench history`: what changed since last night (or a date), and a claim's runs over time."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from claimbench.bench import peer_history, peers
from claimbench.cli import project
from claimbench.cli.common import console, fail, global_options
from claimbench.harness import history, run_checks, selection
from claimbench.harness.claims import find_claim


def _point_dict(point: history.HistoryPoint) -> dict[str, Any]:
    run = point.run
    return {
        "run_id": run.run_id,
        "date": point.date,
        "commit": run.info.git_sha,
        "profile": run.info.profile,
        "scored": run.current,
        "not_scored_because": run.exclusion,
        "verdict": run.verdict,
        "conditions": [
            {
                "condition": str(cs.condition),
                "estimate": cs.estimate,
                "ci_lo": cs.ci_lo,
                "ci_hi": cs.ci_hi,
                "status": cs.status,
            }
            for cs in run.conditions
        ],
    }


def _engine_change_dict(change: peer_history.EngineChange) -> dict[str, Any]:
    data = asdict(change)
    for side in ("before", "after"):
        data[side] = asdict(getattr(change, side))
    data["line"] = change.describe()
    return data


def history_command(
    ctx: typer.Context,
    claim_id: Annotated[
        str | None, typer.Option("--claim", metavar="ID", help="Only this claim, with its runs.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DATE",
            help="Changes whose later run is on or after DATE (YYYY-MM-DD); default: the "
            "newest run's date (last night).",
        ),
    ] = None,
    results_dir: Annotated[
        Path | None, typer.Option(help="Results store (default: <root>/results).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Verdicts that flipped, estimates that moved beyond noise, claims unscored by a design
    change, new hardware classes and engine regressions, since last night or --since DATE."""
    root = global_options(ctx).root
    claims = project.open_claims(root)
    if claim_id is not None:
        try:
            claims = [find_claim(claims, claim_id)]
        except ValueError as err:
            fail(str(err))
    day = None
    if since is not None:
        try:
            day = selection.parse_since(since).strftime("%Y-%m-%d")
        except ValueError as err:
            fail(str(err))
    store = project.results_dir(root, results_dir)
    runs = project.read_results(store)
    designs = run_checks.today_designs(root, claims)
    histories = [history.claim_history(claim, runs, designs) for claim in claims]
    # Without --since each side counts from its own newest night (the peer comparison may not
    # have run on the claims' last night).
    changes = history.changes_since(histories, day)
    engine = (
        []
        if claim_id
        else peer_history.engine_changes(peer_history.engine_series(peers.read_peers(store)), day)
    )
    if as_json:
        data: dict[str, Any] = {
            "since": day or history.last_night(histories),
            "changes": [asdict(c) | {"line": c.describe()} for c in changes],
            "engine": [_engine_change_dict(c) for c in engine],
        }
        if claim_id is not None:
            data["series"] = [
                {
                    "evidence": s.evidence,
                    "in_scope": s.in_scope,
                    "runs": [_point_dict(p) for p in s.points],
                }
                for s in histories[0].series
            ]
        console.print(json.dumps(data, indent=2, default=str), soft_wrap=True)
        return
    if claim_id is not None:
        for s in histories[0].series:
            scope = "" if s.in_scope else " (outside scope: indicative)"
            console.print(f"{s.evidence}{scope}:", soft_wrap=True)
            for p in s.points:
                state = "scored" if p.run.current else f"not scored: {p.run.exclusion}"
                values = "; ".join(
                    f"{cs.condition.metric} {history.interval_text(cs)}"
                    for cs in p.run.conditions
                    if cs.status != "other-basis"
                )
                console.print(
                    f"  {p.date} {p.run.info.git_sha or '?'} {p.run.info.profile} "
                    f"{p.run.verdict} ({state}) {values}",
                    soft_wrap=True,
                )
    if not changes and not engine:
        console.print("no changes", soft_wrap=True)
    for change in changes:
        console.print(change.describe(), soft_wrap=True)
    for change in engine:
        console.print(change.describe(), soft_wrap=True)
