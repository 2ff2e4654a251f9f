"""The scoreboard site: index.html (claim table, calibration, totals, budget) + one page per claim.

Self-contained: CSS inline, charts as inline SVG, links relative, so it works opened from disk
and published as-is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from claimbench.bench import peer_history, peers
from claimbench.harness import (
    calibration,
    deciding,
    history,
    registry,
    results,
    run_checks,
    scoring,
)
from claimbench.harness.claims import Claim
from claimbench.harness.current_scores import score_current
from claimbench.harness.run_info import RunInfo
from claimbench.platform.files import replace_text
from claimbench.site import charts, history_charts, ledger_charts

BUDGET_USD = 100.0
# What each reason a run is not scored means, for the claim page (harness/run_checks.py).
EXCLUSION_HELP = {
    run_checks.MISSING_PROVENANCE: "a field the scorer relies on is missing or malformed, so the "
    "run cannot be tied to a commit, a design, a hardware class or its model's weights",
    run_checks.EARLIER_PREDICTION: "its prediction hash differs from today's claims.yaml (or it "
    "predates hashes)",
    run_checks.EARLIER_DESIGN: "the experiment's code or a helper it imports has changed since "
    "(or the run predates design hashes)",
    run_checks.DIRTY_TREE: "its code cannot be tied to a commit",
    run_checks.MISSING_DRAFT_HASH: "it ran a draft model without recording which weights",
}
TEMPLATES = Path(__file__).parent / "templates"
CLAIMS_SUBDIR = "claims"
# An experiment's figure must not pull anything from the network.
_EXTERNAL_REF = re.compile(
    r"""(?:href|src)\s*=\s*["']\s*(?:[a-z][a-z0-9+.-]*:)?//|url\(\s*["']?\s*(?:https?:)?//""",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Figure:
    """A figure shown on a claim's page (or the reason it could not be)."""

    title: str
    svg: Markup | None
    error: str | None = None


def format_time(iso: str | None) -> str:
    """``2026-11-29 10:15 UTC`` from an ISO timestamp."""
    if not iso:
        return "-"
    try:
        return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return iso


def _figures(root: Path, claim: Claim, run_dirs: list[Path]) -> list[Figure]:
    """The experiment's optional ``figures(run_dirs)``; a failing hook becomes a note."""
    if not run_dirs or not registry.has_experiment(root, claim):
        return []
    try:
        hook = registry.load_experiment(root, claim).figures
        if hook is None:
            return []
        made = hook(run_dirs)
    except Exception as err:
        return [Figure("figures", None, f"the experiment's figures() failed: {err!r}")]
    shown = []
    for title, svg in made:
        if _EXTERNAL_REF.search(svg):
            shown.append(Figure(title, None, "left out: it references an external URL"))
        else:
            shown.append(Figure(title, Markup(svg)))
    return shown


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = scoring.format_value
    env.filters["when"] = format_time
    env.filters["tojson_pretty"] = lambda x: json.dumps(x, indent=2, sort_keys=True, default=str)
    return env


def _claim_row(
    root: Path, score: scoring.ClaimScore, runs: list[results.StoredRun]
) -> dict[str, Any]:
    """What the index shows for one claim."""
    own = [run for run in runs if run.claim_id == score.claim.id]
    shown = score.shown
    group = score.group(shown.evidence) if shown else None
    # Nothing scored: the newest run against an earlier prediction, shown greyed as such, so a
    # reader still sees what was measured.
    earlier = None
    if shown is None and score.groups:
        earlier = max((g.runs[0] for g in score.groups), key=lambda r: r.run_id)
    return {
        "score": score,
        "claim": score.claim,
        "shown": shown,
        "earlier": earlier,
        "info": (shown or earlier).info if (shown or earlier) else None,
        "indicative": score.verdict == "indicative-only",
        "indicative_reason": deciding.indicative_reason(score),
        "deciding": deciding.what_decides(score.claim),
        "trials_needed": deciding.trials_needed(score),
        "group": group,
        "last_run": own[-1].meta.get("end") if own else None,
        "num_runs": len(own),
        "status": registry.claim_status(root, score.claim, score.verdict),
    }


def _chart_rows(
    score: scoring.ClaimScore, index: int
) -> list[tuple[str, scoring.ConditionScore, scoring.RunScore, scoring.EvidenceGroup]]:
    """Per evidence group that may speak to condition ``index``: its scored run, else its newest
    run (measured against an earlier prediction), with a label saying which."""
    rows = []
    analytic = score.claim.prediction[index].basis == "analytic"
    for group in score.groups:
        if analytic != (group.evidence == "analytic"):
            continue  # not this group's to decide: each basis has its own evidence
        run = group.scored or group.runs[0]
        cs = run.conditions[index]
        label = group.evidence
        if not group.in_scope:
            label += " (indicative)"
        if not run.current:
            label += " (not scored)"
        elif cs.scope_note and group.in_scope:
            label += " (indicative: model class)"
        rows.append((label, cs, run, group))
    return rows


def _condition_items(score: scoring.ClaimScore) -> list[dict[str, Any]]:
    items = []
    for i, condition in enumerate(score.claim.prediction):
        rows = _chart_rows(score, i)
        chart = None
        if any(cs.estimate is not None for _, cs, *_ in rows):
            chart = Markup(charts.condition_svg(condition, [(label, cs) for label, cs, *_ in rows]))
        items.append(
            {"condition": condition, "deciding": score.conditions[i], "rows": rows, "chart": chart}
        )
    return items


def _svg(svg: str | None) -> Markup | None:
    return Markup(svg) if svg is not None else None


def _changes_by_run(claim_history: history.ClaimHistory) -> dict[str, list[history.Change]]:
    """Each run's changes from the previous comparable run of its series (the history table's
    last column)."""
    found: dict[str, list[history.Change]] = {}
    for s in claim_history.series:
        for change in history.series_changes(claim_history.claim, s):
            found.setdefault(change.after_run, []).append(change)
    return found


def render_site(
    root: Path,
    claims: list[Claim],
    runs: list[results.StoredRun],
    out_dir: Path,
    *,
    now: datetime | None = None,
    ledger: pd.DataFrame | None = None,
    budget_usd: float = BUDGET_USD,
    peer_records: list[dict[str, Any]] | None = None,
) -> Path:
    """Write ``out_dir/index.html`` and ``out_dir/claims/<id>.html``; return the index path.

    ``runs`` come from results.read_runs (oldest first); ``root`` is the claims project whose
    experiments may contribute figures. ``ledger`` (harness/ledger.read_ledger) draws the spend
    chart and the $/Mtok table; without one, spend is summed from the runs' meta.json.
    ``peer_records`` (harness/peers.read_peers) give the headline row against vLLM; without
    any it says "not measured".
    """
    env = _environment()
    scores = score_current(root, claims, runs)
    cal = calibration.calibration(scores)
    spent = results.total_cost_usd(runs) if ledger is None else float(ledger["usd"].sum())
    spend_svg = None if ledger is None else Markup(ledger_charts.spend_svg(ledger, budget_usd))
    generated = (now or datetime.now(UTC)).isoformat()
    rows = [_claim_row(root, score, runs) for score in scores]
    histories = [history.history_of(score, runs) for score in scores]
    changes = history.changes_since(histories)
    engine_series = peer_history.engine_series(peer_records or [])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CLAIMS_SUBDIR).mkdir(exist_ok=True)

    index = out_dir / "index.html"
    replace_text(
        index,
        env.get_template("index.html").render(
            rows=rows,
            calibration=cal,
            calibration_svg=Markup(charts.calibration_svg(cal)),
            totals=scoring.verdict_counts(scores),
            spent=spent,
            budget=budget_usd,
            spent_pct=min(100.0, 100.0 * spent / budget_usd),
            spend_svg=spend_svg,
            mtok_rows=[] if ledger is None else ledger_charts.mtok_rows(ledger),
            num_runs=len(runs),
            generated=generated,
            peer_rows=peers.headline(peer_records or []),
            peer_last=peers.latest_attempt(peer_records or []),
            changes=changes,
            engine_changes=peer_history.engine_changes(engine_series),
            engine_series=engine_series,
            engine_flags={
                (s.hardware, q.time): peer_history.point_changes(s.hardware, p, q)
                for s in engine_series
                for p, q in zip(s.points, s.points[1:], strict=False)
            },
            since=history.last_night(histories),
        ),
    )
    for row, claim_history in zip(rows, histories, strict=True):
        claim = row["claim"]
        own = [run for run in runs if run.claim_id == claim.id]
        page = out_dir / CLAIMS_SUBDIR / f"{claim.id}.html"
        replace_text(
            page,
            env.get_template("claim.html").render(
                row=row,
                conditions=_condition_items(row["score"]),
                runs=list(reversed(own)),
                run_info=RunInfo.from_meta,
                has_experiment=registry.has_experiment(root, claim),
                experiment=registry.experiment_path(root, claim).relative_to(root),
                figures=_figures(root, claim, [run.path for run in own]),
                exclusion_help=EXCLUSION_HELP,
                generated=generated,
                history=claim_history,
                history_charts={
                    s.evidence: _svg(history_charts.history_svg(claim, s))
                    for s in claim_history.series
                },
                history_changes=_changes_by_run(claim_history),
            ),
        )
    return index
