"""What both front ends do to a claims project: score it, build its site, ask the budget gate
before a run of its claims, report the budget.

`claimbench score`, `site`, `run` and `budget` (cli/) and the MCP tools (ops/runbook.py and
the job worker, ops/job_work.py) are thin over these: each front end chooses the runs it
counts, turns ServiceError into its own one-line refusal (exit 2, or an invalid-params error)
and prints or returns what comes back. Both then run the admitted claims with
ledger/run_claims.py's batch runner, each with its own progress reporting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from claimbench.harness import calibration, results, scoring
from claimbench.harness.claims import Claim, ClaimsError
from claimbench.harness.current_scores import score_current
from claimbench.harness.project_config import BudgetSettings, load_project_config
from claimbench.harness.score_file import write_scores
from claimbench.ledger import ledger, spend_gate
from claimbench.ledger.budget_report import BudgetReport, budget_report
from claimbench.ledger.prices import UnpricedError


class ServiceError(ValueError):
    """Bad project input found before any work (claims.yaml's settings, a corrupt ledger, a
    run with no price): one line saying what. Files are left as they are."""


@dataclass(frozen=True)
class ProjectScores:
    """Every claim's score from a set of stored runs, with calibration and the verdict counts."""

    scores: list[scoring.ClaimScore]
    calibration: calibration.Calibration
    totals: dict[str, int]  # verdict -> number of claims
    num_runs: int

    def summary(self) -> str:
        """``3 confirmed · 1 refuted · ...``: the verdict counts on one line."""
        return " · ".join(f"{n} {verdict}" for verdict, n in self.totals.items())


@dataclass(frozen=True)
class BuiltSite:
    """A rendered scoreboard: its index page and how many claims and runs it shows."""

    index: Path
    num_claims: int
    num_runs: int


def score_project(root: Path, claims: list[Claim], runs: list[results.StoredRun]) -> ProjectScores:
    """``claims`` scored from ``runs`` against today's predictions and designs; nothing written."""
    scores = score_current(root, claims, runs)
    return ProjectScores(
        scores=scores,
        calibration=calibration.calibration(scores),
        totals=scoring.verdict_counts(scores),
        num_runs=len(runs),
    )


def score_and_write(
    root: Path, store: Path, claims: list[Claim], runs: list[results.StoredRun]
) -> tuple[ProjectScores, Path]:
    """score_project, then the scores written to ``store``'s scores.parquet (replaced whole,
    for readers outside the package: nothing in claimbench reads it back)."""
    scored = score_project(root, claims, runs)
    return scored, write_scores(store, scored.scores)


def build_site(
    root: Path, store: Path, claims: list[Claim], runs: list[results.StoredRun], out_dir: Path
) -> BuiltSite:
    """Render the scoreboard of ``runs`` into ``out_dir``, scoring them as score_project does
    (the site never reads scores.parquet: it shows more than the flat table holds). Spend and
    the peer comparison are the whole store's, whichever runs are shown. ServiceError for a
    corrupt ledger or bad claims.yaml settings, before anything is written."""
    from claimbench.bench.peers import read_peers
    from claimbench.site.render import render_site

    spend = _read_ledger(store)
    budget_usd = _budget_settings(root).usd
    index = render_site(
        root,
        claims,
        runs,
        out_dir,
        ledger=spend,
        budget_usd=budget_usd,
        peer_records=read_peers(store),
    )
    return BuiltSite(index, len(claims), len(runs))


def spend_plan(
    root: Path, store: Path, selected: list[Claim], profile: str, trials: int | None
) -> spend_gate.SpendPlan:
    """The budget gate's answer for running ``selected`` on this machine (ledger/spend_gate.py);
    ServiceError for bad claims.yaml settings or a corrupt ledger."""
    try:
        return spend_gate.plan_spend(root, store, selected, profile, trials)
    except (ClaimsError, ledger.LedgerError) as err:
        raise ServiceError(str(err)) from None


def budget(root: Path, store: Path, *, backfill: bool = False) -> BudgetReport:
    """The ledger's spend against claims.yaml's budget, $/Mtok per claim and the runs it lacks
    (after adding those, priced from their meta.json, when ``backfill``)."""
    settings = _budget_settings(root)
    try:
        return budget_report(store, settings.usd, settings.prices, backfill=backfill)
    except (ledger.LedgerError, UnpricedError) as err:
        raise ServiceError(str(err)) from None


def _budget_settings(root: Path) -> BudgetSettings:
    try:
        return load_project_config(root).budget
    except ClaimsError as err:
        raise ServiceError(str(err)) from None


def _read_ledger(store: Path) -> pd.DataFrame:
    try:
        return ledger.read_ledger(store)
    except ledger.LedgerError as err:
        raise ServiceError(str(err)) from None
