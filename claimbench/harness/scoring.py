"""Scoring: each condition decided by evidence of its basis in the claim's scope; verdicts.

Evidence groups: one per hardware class (tpu, gpu, cpu) holding every run with measured values
of the claim's measured conditions, and one "analytic" group of the runs with analytic values of
its analytic conditions. Groups never displace each other. Within a group the scored run is the
newest whose meta ``prediction_hash`` equals today's ``claim.prediction_hash(profile)``; runs
measured against an earlier prediction (or stored before hashes) are shown, never scored.

Conditions: an analytic condition is decided by the scored analytic run's value, exactly (no
interval). A measured condition is decided by a run's trials of one class: each trial's values
are averaged, and the estimate and its interval come from harness.intervals (Student-t; ratios
in log space). Too few trials (evidence_rules.min_trials) or identical values in every trial
leave it undecided, except for a "never" condition (``metric <= 0``, an event predicted never
to happen), which is an observation: any trial with an event fails it, none in every trial
holds it. A measured condition is never filled from analytic values.

Verdict: the headline is the scored run of the first in-scope measured class in MEASURED order.
confirmed: every condition holds on in-scope evidence of its basis. refuted: some condition fails
on such evidence (a failing analytic condition refutes: every condition must hold).
indicative-only: measured conditions have only out-of-scope evidence and nothing in scope fails.
not-run: no scored run at all. inconclusive: anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from claimbench.harness import evidence_rules, intervals
from claimbench.harness.claims import PROFILES, Claim, Condition
from claimbench.harness.evidence_rules import ANALYTIC, MEASURED
from claimbench.harness.results import StoredRun
from claimbench.harness.run_info import RunInfo

VERDICTS = ("confirmed", "refuted", "inconclusive", "indicative-only", "not-run")
DECIDED = ("confirmed", "refuted")
# other-basis: the condition is not this evidence kind's to decide (a measured one in an
# analytic run).
STATUSES = ("holds", "fails", "unclear", "too-few-trials", "missing", "other-basis")


@dataclass(frozen=True)
class ConditionScore:
    """One condition's estimate from one run's values of one evidence class."""

    condition: Condition
    trial_values: tuple[float, ...]  # one per trial, in trial order
    estimate: float | None  # None when the metric is missing
    ci_lo: float | None  # None when there is no honest interval (constant, one trial, missing)
    ci_hi: float | None
    method: str | None  # intervals.METHODS, "exact" (analytic), "inconsistent", or None
    evidence: str | None  # the class the values came from
    in_scope: bool  # whether this evidence may decide the condition (basis and scope)
    status: str  # one of STATUSES
    unit: str = ""
    min_trials: int = evidence_rules.MIN_TRIALS
    run_id: str | None = None

    @property
    def num_trials(self) -> int:
        return len(self.trial_values)

    @property
    def constant(self) -> bool:
        """A measured metric with the same value in every trial (no interval, undecided)."""
        return self.method == "constant"


@dataclass(frozen=True)
class RunScore:
    """One stored run scored on one evidence class's values."""

    info: RunInfo
    evidence: str  # cpu | gpu | tpu | analytic
    in_scope: bool
    current: bool  # measured against today's prediction (hash matches); only these are scored
    conditions: tuple[ConditionScore, ...]
    verdict: str  # confirmed | refuted | inconclusive: this run's own verdict

    @property
    def run_id(self) -> str:
        return self.info.run_id


@dataclass(frozen=True)
class EvidenceGroup:
    """Every run of one evidence class for one claim (replications), newest first."""

    evidence: str
    in_scope: bool
    runs: tuple[RunScore, ...]

    @property
    def scored(self) -> RunScore | None:
        """The newest run measured against today's prediction, or None."""
        return next((r for r in self.runs if r.current), None)

    @property
    def current_runs(self) -> tuple[RunScore, ...]:
        return tuple(r for r in self.runs if r.current)

    @property
    def earlier_runs(self) -> tuple[RunScore, ...]:
        """Runs measured against an earlier prediction: shown, not scored."""
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
    def num_earlier(self) -> int:
        """Runs measured against an earlier prediction, over every group."""
        return sum(len(g.earlier_runs) for g in self.groups)

    def group(self, evidence: str) -> EvidenceGroup | None:
        """The group of ``evidence``, if it has runs."""
        return next((g for g in self.groups if g.evidence == evidence), None)


def interval_status(condition: Condition, lo: float, hi: float) -> str:
    """holds: [lo, hi] wholly on the predicted side; fails: wholly on the wrong side; else
    unclear."""
    if condition.holds(lo) and condition.holds(hi):
        return "holds"
    if not condition.holds(lo) and not condition.holds(hi):
        return "fails"
    return "unclear"


def trial_values(measurements: pd.DataFrame, metric: str) -> np.ndarray:
    """f64[num_trials]: the mean of each trial's values of ``metric``, in trial order."""
    rows = measurements[measurements["metric"] == metric]
    return rows.groupby("trial")["value"].mean().sort_index().to_numpy(dtype=np.float64)


def _unit(measurements: pd.DataFrame, metric: str) -> str:
    units = measurements.loc[measurements["metric"] == metric, "unit"].dropna().astype(str)
    units = units[units != ""]
    return str(units.iloc[0]) if len(units) else ""


def missing_score(condition: Condition, status: str = "missing") -> ConditionScore:
    """A condition with no values (missing) or not this evidence's to decide (other-basis)."""
    return ConditionScore(condition, (), None, None, None, None, None, False, status)


def score_condition(
    condition: Condition,
    rows: pd.DataFrame,
    evidence: str,
    *,
    scope: str,
    profile: str,
    run_id: str | None = None,
) -> ConditionScore:
    """Score ``condition`` on ``rows`` (one run's measurements of one ``evidence`` class)."""
    values = trial_values(rows, condition.metric)
    unit = _unit(rows, condition.metric)
    if values.size == 0:
        return missing_score(condition)
    if evidence == ANALYTIC:
        # Arithmetic, recorded once: the value is exact. Rows that disagree (an old run that
        # copied a value per trial, then changed it) decide nothing.
        exact = bool(np.ptp(values) == 0)
        value = float(values[0]) if exact else float(values.mean())
        status = ("holds" if condition.holds(value) else "fails") if exact else "unclear"
        return ConditionScore(
            condition,
            tuple(values.tolist()),
            value,
            value if exact else None,
            value if exact else None,
            "exact" if exact else "inconsistent",
            evidence,
            condition.basis == "analytic",
            status,
            unit,
            1,
            run_id,
        )
    need = evidence_rules.min_trials(condition.metric, unit, profile)
    interval = intervals.estimate_interval(values, unit)
    if values.size < need:
        status = "too-few-trials"
    elif is_never_condition(condition):
        # "metric <= 0": the prediction is that an event never happens (a top-tier preemption,
        # a greedy mismatch, a compile while serving). That is an observation, not a mean to
        # estimate: one trial with an event refutes it; none in every trial (at the trial
        # minimum) holds. The interval stays the data's range, never a zero-width estimate.
        status = "fails" if bool((values > 0).any()) else "holds"
        interval = intervals.Interval(
            float(values.mean()), float(values.min()), float(values.max()), "never"
        )
    elif interval.lo is None or interval.hi is None:
        status = "unclear"  # constant: identical trials give no interval to decide with
    else:
        status = interval_status(condition, interval.lo, interval.hi)
    return ConditionScore(
        condition,
        tuple(values.tolist()),
        interval.estimate,
        interval.lo,
        interval.hi,
        interval.method,
        evidence,
        condition.basis == "measured" and evidence_rules.in_scope(scope, evidence),
        status,
        unit,
        need,
        run_id,
    )


def is_never_condition(condition: Condition) -> bool:
    """Whether ``condition`` predicts an event count of zero (``metric <= 0``)."""
    return condition.op == "<=" and condition.value == 0


def combine(conditions: tuple[ConditionScore, ...]) -> str:
    """A verdict from condition statuses: refuted if any fails, confirmed if all hold, else
    inconclusive; other-basis conditions are left out."""
    statuses = [c.status for c in conditions if c.status != "other-basis"]
    if any(s == "fails" for s in statuses):
        return "refuted"
    if statuses and all(s == "holds" for s in statuses):
        return "confirmed"
    return "inconclusive"


def is_current(claim: Claim, meta: dict) -> bool:
    """Whether the run was measured against today's prediction of ``claim``."""
    profile = meta.get("profile")
    if profile not in PROFILES:
        return False
    return meta.get("prediction_hash") == claim.prediction_hash(profile)


def score_run(
    claim: Claim,
    run: StoredRun,
    evidence: str,
    analytic_scores: tuple[ConditionScore, ...] | None = None,
) -> RunScore:
    """Score ``run``'s values of one evidence class against ``claim``.

    An analytic run scores the analytic conditions (measured ones are other-basis). A measured
    run scores the measured conditions and takes the analytic ones from ``analytic_scores`` (the
    claim's scored analytic evidence; missing when None).
    """
    info = RunInfo.from_meta(run.meta)
    rows = run.measurements
    rows = rows[(rows["claim_id"] == claim.id) & (rows["evidence"] == evidence)]
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
                )
            )
    conditions = tuple(scores)
    return RunScore(
        info=info,
        evidence=evidence,
        in_scope=evidence == ANALYTIC or evidence_rules.in_scope(claim.scope, evidence),
        current=is_current(claim, run.meta),
        conditions=conditions,
        verdict=combine(conditions),
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


def score_claim(claim: Claim, runs: list[StoredRun]) -> ClaimScore:
    """The claim's verdict from ``runs`` (any order; other claims' runs are ignored)."""
    own = sorted((r for r in runs if r.claim_id == claim.id), key=lambda r: r.run_id, reverse=True)
    by_class: dict[str, list[StoredRun]] = {}
    for run in own:
        for evidence in _classes(claim, run):
            by_class.setdefault(evidence, []).append(run)

    analytic_group = None
    if ANALYTIC in by_class:
        analytic_runs = tuple(score_run(claim, r, ANALYTIC) for r in by_class[ANALYTIC])
        analytic_group = EvidenceGroup(ANALYTIC, True, analytic_runs)
    analytic_run = analytic_group.scored if analytic_group else None
    analytic_scores = analytic_run.conditions if analytic_run else None

    measured = [
        EvidenceGroup(
            evidence,
            evidence_rules.in_scope(claim.scope, evidence),
            tuple(score_run(claim, r, evidence, analytic_scores) for r in by_class[evidence]),
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
    elif headline is None and scored:
        verdict = "indicative-only"
    else:
        verdict = "inconclusive"
    return ClaimScore(claim, verdict, conditions, shown, headline, groups)


def score_claims(claims: list[Claim], runs: list[StoredRun]) -> list[ClaimScore]:
    """Every claim's score, in the claims file's order."""
    return [score_claim(claim, runs) for claim in claims]


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
