"""A claim's runs as a time series per hardware class, and what changed between nights.

Every stored run of a claim is a point of its hardware class's series (harness/scoring.py's
evidence groups, oldest first): its date, commit, profile, whether it may be scored (and if
not, why), each condition's estimate and interval and the run's own verdict.

The change rule. Consecutive runs of one series are compared when they are comparable: the same
profile (a quick run is not a noisy full one), and both pass the checks on the run itself (the
provenance record, a committed tree, a draft's hashes: run_checks). Between comparable runs:

- flip: the run's own verdict differs from the previous one's;
- shift: a measured condition's 95% interval does not overlap the previous run's interval (an
  analytic value that differs at all: it is exact); a move within the intervals is noise, and a
  condition without an interval on either side (one trial, constant values) is not compared;
- design changed: the two runs measured different designs or predictions (their design or
  prediction hashes differ); nothing else is compared across such a pair.

A series whose first run falls in the window is a new hardware class, and a series with runs
none of which may be scored, the newest measured with an earlier design, is unscored: its
design changed and no run of today's design exists yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from claimbench.harness import run_checks, scoring
from claimbench.harness.claims import Claim
from claimbench.harness.condition_scores import ConditionScore
from claimbench.harness.results import StoredRun
from claimbench.harness.run_info import UNKNOWN

FLIP = "verdict flipped"
SHIFT = "shift beyond noise"
DESIGN_CHANGED = "design changed"
UNSCORED = "unscored: design changed"
NEW_CLASS = "new hardware class"
CHANGE_KINDS = (FLIP, SHIFT, DESIGN_CHANGED, UNSCORED, NEW_CLASS)
# Exclusions that say something about the run itself, not about today's claims file or code:
# such a run is never compared with its neighbours (nor is one that lacks provenance: it cannot
# be tied to the design it measured).
_NOT_COMPARABLE = (run_checks.DIRTY_TREE, run_checks.MISSING_DRAFT_HASH)


@dataclass(frozen=True)
class HistoryPoint:
    """One run of one hardware class's series."""

    run: scoring.RunScore
    design_hash: str | None  # None: the run predates design hashes
    prediction_hash: str | None

    @property
    def date(self) -> str:
        return self.run.info.date

    @property
    def comparable(self) -> bool:
        """Whether the run passes the checks on the run itself (compared with its neighbours)."""
        reason = self.run.exclusion or ""
        return reason not in _NOT_COMPARABLE and not reason.startswith(
            run_checks.MISSING_PROVENANCE
        )


@dataclass(frozen=True)
class Series:
    """Every run of one claim on one evidence class, oldest first."""

    evidence: str  # cpu | gpu | tpu | analytic
    in_scope: bool
    points: tuple[HistoryPoint, ...]


@dataclass(frozen=True)
class Change:
    """One change between two runs of a series (or of a series' state), for people to read."""

    claim_id: str
    evidence: str
    kind: str  # one of CHANGE_KINDS
    date: str  # the later run's date
    after_run: str
    after_commit: str | None
    before_run: str | None = None  # None for a new hardware class
    before_commit: str | None = None
    condition: str | None = None  # the condition that shifted (shift only)
    before: str = ""  # what the earlier run said (verdict, or estimate [lo, hi])
    after: str = ""

    def describe(self) -> str:
        """One line: ``kv-int8 tpu: verdict flipped confirmed -> refuted (abc123 -> def456)``."""
        what = f"{self.claim_id} {self.evidence}: {self.kind}"
        if self.condition:
            what += f" on {self.condition}"
        if self.before:
            what += f": {self.before} -> {self.after}"
        elif self.after:
            what += f": {self.after}"
        if self.before_run is None:
            return f"{what} (at {self.after_commit or '?'}, run {self.after_run})"
        commits = f"{self.before_commit or '?'} -> {self.after_commit or '?'}"
        return f"{what} ({commits}, run {self.after_run})"


@dataclass(frozen=True)
class ClaimHistory:
    """A claim's series, one per evidence class with runs (scoring's group order)."""

    claim: Claim
    series: tuple[Series, ...]


def claim_history(
    claim: Claim, runs: list[StoredRun], designs: Mapping[str, str] | None = None
) -> ClaimHistory:
    """Every run of ``claim`` in ``runs`` as series per evidence class, each run scored on its
    own (scoring.score_claim's replications); ``designs`` as for scoring.score_claim."""
    return history_of(scoring.score_claim(claim, runs, designs), runs)


def history_of(score: scoring.ClaimScore, runs: list[StoredRun]) -> ClaimHistory:
    """The history behind a claim's score (its evidence groups); ``runs``: those it was scored
    from (their meta.json carries the design and prediction hashes)."""
    claim = score.claim
    metas = {run.run_id: run.meta for run in runs if run.claim_id == claim.id}
    series = []
    for group in score.groups:
        points = tuple(
            HistoryPoint(
                run=run,
                design_hash=metas[run.run_id].get("design_hash"),
                prediction_hash=metas[run.run_id].get("prediction_hash"),
            )
            for run in reversed(group.runs)
        )
        series.append(Series(group.evidence, group.in_scope, points))
    return ClaimHistory(claim, tuple(series))


def interval_text(cs: ConditionScore) -> str:
    """``12.3 [11.9, 12.8]``, or the estimate alone without an interval, or "-"."""
    if cs.estimate is None:
        return "-"
    text = scoring.format_value(cs.estimate)
    if cs.ci_lo is not None and cs.ci_hi is not None:
        text += f" [{scoring.format_value(cs.ci_lo)}, {scoring.format_value(cs.ci_hi)}]"
    return text


def shifted(before: ConditionScore, after: ConditionScore) -> bool:
    """Whether ``after`` moved beyond noise from ``before``: the two intervals do not overlap
    (analytic values: differ at all); False when either side lacks an interval."""
    if before.estimate is None or after.estimate is None:
        return False
    if before.method == "exact" and after.method == "exact":
        return before.estimate != after.estimate
    if None in (before.ci_lo, before.ci_hi, after.ci_lo, after.ci_hi):
        return False
    return after.ci_lo > before.ci_hi or after.ci_hi < before.ci_lo


def _pair_changes(claim: Claim, evidence: str, p: HistoryPoint, q: HistoryPoint) -> list[Change]:
    """What changed from ``p`` to the next comparable run ``q`` of the same series."""
    base = {
        "claim_id": claim.id,
        "evidence": evidence,
        "date": q.date,
        "after_run": q.run.run_id,
        "after_commit": q.run.info.git_sha,
        "before_run": p.run.run_id,
        "before_commit": p.run.info.git_sha,
    }
    if p.design_hash != q.design_hash or p.prediction_hash != q.prediction_hash:
        what = "design" if p.design_hash != q.design_hash else "prediction"
        return [Change(kind=DESIGN_CHANGED, before=f"earlier {what}", after=f"new {what}", **base)]
    changes = []
    if p.run.verdict != q.run.verdict:
        changes.append(Change(kind=FLIP, before=p.run.verdict, after=q.run.verdict, **base))
    for before, after in zip(p.run.conditions, q.run.conditions, strict=True):
        if after.status != "other-basis" and shifted(before, after):
            changes.append(
                Change(
                    kind=SHIFT,
                    condition=str(after.condition),
                    before=interval_text(before),
                    after=interval_text(after),
                    **base,
                )
            )
    return changes


def series_changes(claim: Claim, series: Series) -> list[Change]:
    """Every change along ``series``, oldest first: between consecutive comparable runs of
    one profile, the new class at its first run, and the unscored state at its newest run."""
    changes: list[Change] = []
    first = series.points[0]
    changes.append(
        Change(
            claim.id,
            series.evidence,
            NEW_CLASS,
            first.date,
            first.run.run_id,
            first.run.info.git_sha,
            after=first.run.verdict,
        )
    )
    previous: dict[str, HistoryPoint] = {}
    for point in series.points:
        if not point.comparable:
            continue
        profile = point.run.info.profile
        if profile in previous:
            changes.extend(_pair_changes(claim, series.evidence, previous[profile], point))
        previous[profile] = point
    newest = series.points[-1]
    if not any(p.run.current for p in series.points) and (
        newest.run.exclusion == run_checks.EARLIER_DESIGN
    ):
        changes.append(
            Change(
                claim.id,
                series.evidence,
                UNSCORED,
                newest.date,
                newest.run.run_id,
                newest.run.info.git_sha,
                after="no run of today's design",
            )
        )
    return changes


def last_night(histories: list[ClaimHistory]) -> str | None:
    """The newest run's date (``YYYY-MM-DD``) over every history: where "since last night"
    counts from; None without runs."""
    dates = [p.date for h in histories for s in h.series for p in s.points if p.date != UNKNOWN]
    return max(dates) if dates else None


def changes_since(histories: list[ClaimHistory], since: str | None = None) -> list[Change]:
    """The changes whose later run is dated ``since`` (``YYYY-MM-DD``) or after; ``since``
    None: the newest run's date over every history, "last night". An unscored state is always
    listed. Claims' order, then date."""
    since = since or last_night(histories)
    if since is None:
        return []
    found = []
    for history in histories:
        for series in history.series:
            # Unscored is a state, not an event: it stands until a run of today's design lands.
            found.extend(
                c
                for c in series_changes(history.claim, series)
                if c.kind == UNSCORED or (c.date != UNKNOWN and c.date >= since)
            )
    return found
