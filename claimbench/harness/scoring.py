"""Scoring: each condition decided by evidence of its basis in the claim's scope; verdicts.

Evidence groups: one per hardware class (tpu, gpu, cpu) holding every run with measured values
of the claim's measured conditions, and one "analytic" group of the runs with analytic values of
its analytic conditions. Groups never displace each other. A run may be scored only if it passes
harness/run_checks.py (today's prediction and design, a committed tree, its provenance); the
others are listed with the reason, never scored. Within a group the scored run is the newest
such run of the full profile, else the newest of quick: the full profile outranks quick.

Trials: a trial whose realised load was off its target (evidence_rules.OFF_TARGET) failed to run
the design. Every value of it is dropped before any condition is scored, and it is reported.

Conditions: an analytic condition is decided by the scored analytic run's value, exactly (no
interval). A measured condition is decided by a run's trials of one class: each trial's values
are averaged, and the estimate and its interval come from harness.intervals (Student-t; ratios
in log space). Too few trials (evidence_rules.min_trials) or identical values in every trial
leave it undecided, except for a "never" condition (``metric <= 0``, an event predicted never
to happen), which is an observation: any trial with an event fails it. None in every trial holds
it only if the measurement is shown able to see the event: its positive control
(``<metric>_control``, the same measurement under a setting where the event can happen) fired
in at least the trial minimum of those trials. Zero with a silent or missing control is unclear.
A measured condition is never filled from analytic values, and a condition with a
``model_class`` is decided only by a run of a model of that class (evidence_rules).

Verdict: the headline is the scored run of the first in-scope measured class in MEASURED order.
confirmed: every condition holds on in-scope evidence of its basis. refuted: some condition fails
on such evidence (a failing analytic condition refutes: every condition must hold).
indicative-only: nothing in scope fails, and either measured conditions have only out-of-scope
hardware, or every condition that does not hold in scope has a value from out of scope (another
hardware class or model class). not-run: no scored run at all. inconclusive: anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from claimbench.harness import evidence_rules, run_checks
from claimbench.harness.claims import Claim
from claimbench.harness.condition_scores import (
    ConditionScore,
    FailedTrial,
    failed_trials,
    missing_score,
    score_condition,
    usable_rows,
)
from claimbench.harness.evidence_rules import ANALYTIC, MEASURED
from claimbench.harness.results import StoredRun
from claimbench.harness.run_info import RunInfo
from claimbench.harness.trends import Trend, run_trends

VERDICTS = ("confirmed", "refuted", "inconclusive", "indicative-only", "not-run")
DECIDED = ("confirmed", "refuted")


@dataclass(frozen=True)
class RunScore:
    """One stored run scored on one evidence class's values."""

    info: RunInfo
    evidence: str  # cpu | gpu | tpu | analytic
    in_scope: bool
    conditions: tuple[ConditionScore, ...]
    verdict: str  # confirmed | refuted | inconclusive: this run's own verdict
    exclusion: str | None = None  # why it may not be scored (run_checks.EXCLUSIONS), or None
    failed_trials: tuple[FailedTrial, ...] = ()  # dropped before scoring
    trends: tuple[Trend, ...] = ()  # metrics that drift across the scored trials

    @property
    def run_id(self) -> str:
        return self.info.run_id

    @property
    def current(self) -> bool:
        """Whether the run may be scored (it passes every run check)."""
        return self.exclusion is None


@dataclass(frozen=True)
class EvidenceGroup:
    """Every run of one evidence class for one claim (replications), newest first."""

    evidence: str
    in_scope: bool
    runs: tuple[RunScore, ...]

    @property
    def scored(self) -> RunScore | None:
        """The newest current run of the full profile, else the newest current quick one."""
        current = self.current_runs
        full = next((r for r in current if r.info.profile == "full"), None)
        return full or (current[0] if current else None)

    @property
    def current_runs(self) -> tuple[RunScore, ...]:
        return tuple(r for r in self.runs if r.current)

    @property
    def earlier_runs(self) -> tuple[RunScore, ...]:
        """Runs that may not be scored (an earlier prediction or design, a dirty tree, missing
        provenance): shown, not scored."""
        return tuple(r for r in self.runs if not r.current)

    @property
    def num_agree(self) -> int:
        """Current runs whose own verdict equals the scored run's (the scored run included)."""
        scored = self.scored
        return sum(r.verdict == scored.verdict for r in self.current_runs) if scored else 0


@dataclass(frozen=True)
class ClaimScore:
    """A claim's verdict, the condition scores behind it, and every evidence group."""

    claim: Claim
    verdict: str  # one of VERDICTS
    conditions: tuple[ConditionScore, ...]  # per condition: the deciding (or shown) score
    shown: RunScore | None  # the run the row shows: the headline, else indicative or analytic
    headline: RunScore | None  # the in-scope measured run the verdict comes from
    groups: tuple[EvidenceGroup, ...]  # measured classes in MEASURED order, then analytic

    @property
    def decided(self) -> bool:
        """Confirmed or refuted on in-scope evidence of each condition's basis; the claims
        calibration counts."""
        if self.verdict == "confirmed":
            return all(cs.in_scope and cs.status == "holds" for cs in self.conditions)
        if self.verdict == "refuted":
            return any(cs.in_scope and cs.status == "fails" for cs in self.conditions)
        return False

    @property
    def decided_by_measurement(self) -> bool:
        """Decided, and on a measurement: confirmed with a measured condition among those that
        hold, or refuted by a measured condition. The claims calibration counts; one decided
        by arithmetic alone forecast no measurement."""
        if not self.decided:
            return False
        measured = [cs for cs in self.conditions if cs.condition.basis == "measured"]
        if self.verdict == "confirmed":
            return bool(measured)
        return any(cs.in_scope and cs.status == "fails" for cs in measured)

    @property
    def num_earlier(self) -> int:
        """Runs that may not be scored, over every group."""
        return sum(len(g.earlier_runs) for g in self.groups)

    def exclusion_counts(self) -> dict[str, int]:
        """Runs not scored, per reason (run_checks.EXCLUSIONS order; reasons with none left out)."""
        counts = dict.fromkeys(run_checks.EXCLUSIONS, 0)
        for group in self.groups:
            for run in group.earlier_runs:
                counts[run.exclusion] = counts.get(run.exclusion, 0) + 1
        return {reason: n for reason, n in counts.items() if n}

    @property
    def disagreements(self) -> tuple[EvidenceGroup, ...]:
        """In-scope hardware classes whose scored run's verdict differs from the headline's."""
        if self.headline is None:
            return ()
        return tuple(
            g
            for g in self.groups
            if g.evidence != ANALYTIC
            and g.in_scope
            and g.scored is not None
            and g.scored.verdict != self.headline.verdict
        )

    @property
    def trend_warnings(self) -> tuple[str, ...]:
        """The shown run's metrics that drift across its trials (harness/trends.py), described."""
        return tuple(t.describe() for t in self.shown.trends) if self.shown else ()

    def group(self, evidence: str) -> EvidenceGroup | None:
        """The group of ``evidence``, if it has runs."""
        return next((g for g in self.groups if g.evidence == evidence), None)


def combine(conditions: tuple[ConditionScore, ...]) -> str:
    """A verdict from condition statuses: refuted if any fails, confirmed if all hold, else
    inconclusive; other-basis conditions are left out."""
    statuses = [c.status for c in conditions if c.status != "other-basis"]
    if any(s == "fails" for s in statuses):
        return "refuted"
    if statuses and all(s == "holds" for s in statuses):
        return "confirmed"
    return "inconclusive"


def score_run(
    claim: Claim,
    run: StoredRun,
    evidence: str,
    analytic_scores: tuple[ConditionScore, ...] | None = None,
    designs: Mapping[str, str] | None = None,
) -> RunScore:
    """Score ``run``'s values of one evidence class against ``claim``.

    An analytic run scores the analytic conditions (measured ones are other-basis). A measured
    run scores the measured conditions and takes the analytic ones from ``analytic_scores`` (the
    claim's scored analytic evidence; missing when None). Trials off their realised-load target
    are dropped and listed. ``designs``: today's design hashes (run_checks.exclusion).
    """
    info = RunInfo.from_meta(run.meta)
    rows = run.measurements
    rows = rows[(rows["claim_id"] == claim.id) & (rows["evidence"] == evidence)]
    claim_rows = rows
    failed = failed_trials(rows) if evidence != ANALYTIC else ()
    rows = usable_rows(rows, failed)
    scores = []
    for i, condition in enumerate(claim.prediction):
        if evidence == ANALYTIC and condition.basis == "measured":
            scores.append(missing_score(condition, "other-basis"))
        elif evidence != ANALYTIC and condition.basis == "analytic":
            scores.append(analytic_scores[i] if analytic_scores else missing_score(condition))
        else:
            scores.append(
                score_condition(
                    condition,
                    rows,
                    evidence,
                    scope=claim.scope,
                    profile=info.profile,
                    run_id=info.run_id,
                    num_params=info.model_params,
                    sequential=info.sequential,
                )
            )
    conditions = tuple(scores)
    measured = [c.metric for c in claim.prediction if c.basis == "measured"]
    return RunScore(
        info=info,
        evidence=evidence,
        in_scope=evidence == ANALYTIC or evidence_rules.in_scope(claim.scope, evidence),
        conditions=conditions,
        verdict=combine(conditions),
        exclusion=run_checks.exclusion(claim, run.meta, designs, evidence, claim_rows),
        failed_trials=failed,
        trends=run_trends(rows, measured) if evidence != ANALYTIC else (),
    )


def _classes(claim: Claim, run: StoredRun) -> set[str]:
    """The evidence classes ``run`` holds for ``claim``: a measured class when it has values of
    a measured condition's metric, analytic when it has analytic values of an analytic one."""
    m = run.measurements
    m = m[m["claim_id"] == claim.id]
    classes = set()
    for condition in claim.prediction:
        found = set(m.loc[m["metric"] == condition.metric, "evidence"].astype(str))
        classes |= found & ({ANALYTIC} if condition.basis == "analytic" else set(MEASURED))
    return classes


def _only_out_of_scope(conditions: tuple[ConditionScore, ...]) -> bool:
    """Whether every condition that does not hold in scope has a value from out of scope (another
    hardware class or model class), and at least one does."""
    outside = [cs for cs in conditions if not (cs.in_scope and cs.status == "holds")]
    return bool(outside) and all(
        not cs.in_scope and cs.evidence is not None and cs.status not in ("missing", "other-basis")
        for cs in outside
    )


def score_claim(
    claim: Claim, runs: list[StoredRun], designs: Mapping[str, str] | None = None
) -> ClaimScore:
    """The claim's verdict from ``runs`` (any order; other claims' runs are ignored).

    ``designs`` maps claim ids to today's design hashes (run_checks.today_designs); None skips
    the design check (for runs scored without their experiments at hand).
    """
    own = sorted((r for r in runs if r.claim_id == claim.id), key=lambda r: r.run_id, reverse=True)
    by_class: dict[str, list[StoredRun]] = {}
    for run in own:
        for evidence in _classes(claim, run):
            by_class.setdefault(evidence, []).append(run)

    analytic_group = None
    if ANALYTIC in by_class:
        analytic_runs = tuple(
            score_run(claim, r, ANALYTIC, designs=designs) for r in by_class[ANALYTIC]
        )
        analytic_group = EvidenceGroup(ANALYTIC, True, analytic_runs)
    analytic_run = analytic_group.scored if analytic_group else None
    analytic_scores = analytic_run.conditions if analytic_run else None

    measured = [
        EvidenceGroup(
            evidence,
            evidence_rules.in_scope(claim.scope, evidence),
            tuple(
                score_run(claim, r, evidence, analytic_scores, designs) for r in by_class[evidence]
            ),
        )
        for evidence in MEASURED
        if evidence in by_class
    ]
    groups = tuple(measured) + ((analytic_group,) if analytic_group else ())
    scored = [g.scored for g in measured if g.scored]
    headline = next((g.scored for g in measured if g.in_scope and g.scored), None)
    shown = headline or (scored[0] if scored else analytic_run)
    if shown is None:
        conditions = tuple(missing_score(c) for c in claim.prediction)
        return ClaimScore(claim, "not-run", conditions, None, None, groups)
    conditions = shown.conditions
    if shown.evidence == ANALYTIC:
        # Only analytic evidence: its measured conditions are missing, not other-basis.
        conditions = tuple(
            missing_score(cs.condition) if cs.status == "other-basis" else cs for cs in conditions
        )
    if any(cs.in_scope and cs.status == "fails" for cs in conditions):
        verdict = "refuted"
    elif all(cs.in_scope and cs.status == "holds" for cs in conditions):
        verdict = "confirmed"
    elif (headline is None and scored) or _only_out_of_scope(conditions):
        verdict = "indicative-only"
    else:
        verdict = "inconclusive"
    return ClaimScore(claim, verdict, conditions, shown, headline, groups)


def score_claims(
    claims: list[Claim], runs: list[StoredRun], designs: Mapping[str, str] | None = None
) -> list[ClaimScore]:
    """Every claim's score, in the claims file's order (``designs``: as for score_claim)."""
    return [score_claim(claim, runs, designs) for claim in claims]


def verdict_counts(scores: list[ClaimScore]) -> dict[str, int]:
    """How many claims have each verdict (every verdict present, zeros included)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for score in scores:
        counts[score.verdict] += 1
    return counts


def format_value(x: float | None) -> str:
    """A number for people: three significant digits, thousands without exponent."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
