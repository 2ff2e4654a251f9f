"""One condition scored on one run's values of one evidence class (harness/scoring.py's unit).

A measured condition's trials are averaged per trial and given an estimate and interval by
harness.intervals (a share with recorded counts: the pooled counts, Clopper-Pearson); an analytic
one is exact. A "never" condition (``metric <= 0``) is an observation checked against its positive
control. Trials that failed to run the design (off their realised-load target) are dropped first:
``usable_rows``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from claimbench.harness import confseq, evidence_rules, intervals
from claimbench.harness.claims import Condition
from claimbench.harness.evidence_rules import ANALYTIC
from claimbench.harness.run_info import format_params

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
    in_scope: bool  # whether this evidence may decide the condition (basis, scope, model class)
    status: str  # one of STATUSES
    unit: str = ""
    min_trials: int = evidence_rules.MIN_TRIALS
    run_id: str | None = None
    # A never condition's positive control, one per trial of trial_values (None: not recorded
    # in that trial); empty for other conditions.
    control_values: tuple[float | None, ...] = ()
    # Why this evidence may not decide the condition ("" when it may, or it is not measured).
    scope_note: str = ""

    @property
    def num_trials(self) -> int:
        return len(self.trial_values)

    @property
    def constant(self) -> bool:
        """A measured metric with the same value in every trial (no interval, undecided)."""
        return self.method == "constant"

    @property
    def num_control_fired(self) -> int:
        """Trials whose positive control saw the event."""
        return sum(1 for v in self.control_values if v is not None and v > 0)


@dataclass(frozen=True)
class FailedTrial:
    """A trial that did not run the design: its realised load was off its target, or the
    host's service rate moved by more than the tolerance under it."""

    trial: int
    realised_load: float | None  # realised offered load over measured service (x)
    target: float | None
    reason: str = "realised load off target"


def labels_of(text: object) -> dict | None:
    """A row's labels as a dict; None when they are not a JSON object (a garbled record)."""
    try:
        labels = json.loads(str(text) or "{}")
    except ValueError:
        return None
    return labels if isinstance(labels, dict) else None


def _off_reason(value: float, labels: dict) -> str | None:
    """Why a realised-load row is off by today's rule, or None: the load more than the
    tolerance off its target, or the trial's saturation readings (the bursts bracketing its
    arms) further apart than the tolerance, so its load is not known within it."""
    try:
        target, tolerance = float(labels["target"]), float(labels["tolerance"])
    except (KeyError, TypeError, ValueError):
        return "realised load without its target and tolerance"
    if not (target > 0 and tolerance >= 0 and np.isfinite(value)):
        return "realised load without its target and tolerance"
    if not evidence_rules.on_target(float(value), target, tolerance):
        return "realised load off target"
    readings = labels.get("readings_tok_s") or []
    try:
        rates = [float(r) for r in readings]
    except (TypeError, ValueError):
        return "unreadable saturation readings"
    if len(rates) >= 2 and min(rates) > 0 and max(rates) / min(rates) - 1.0 > tolerance:
        return "service rate moved under the trial"
    return None


def interval_status(condition: Condition, lo: float, hi: float) -> str:
    """holds: [lo, hi] wholly on the predicted side; fails: wholly on the wrong side; else
    unclear."""
    if condition.holds(lo) and condition.holds(hi):
        return "holds"
    if not condition.holds(lo) and not condition.holds(hi):
        return "fails"
    return "unclear"


def trial_series(measurements: pd.DataFrame, metric: str) -> pd.Series:
    """The mean of each trial's values of ``metric``, indexed by trial, in trial order."""
    rows = measurements[measurements["metric"] == metric]
    return rows.groupby("trial")["value"].mean().sort_index().astype(np.float64)


def trial_values(measurements: pd.DataFrame, metric: str) -> np.ndarray:
    """f64[num_trials]: the mean of each trial's values of ``metric``, in trial order."""
    return trial_series(measurements, metric).to_numpy(dtype=np.float64)


def failed_trials(rows: pd.DataFrame) -> tuple[FailedTrial, ...]:
    """The trials of ``rows`` that did not run the design: those the run flagged off target
    (evidence_rules.OFF_TARGET) and those today's rule finds off from their realised-load
    rows' own labels (_off_reason), so deleting a flag does not bring a trial back."""
    off = trial_series(rows, evidence_rules.OFF_TARGET)
    reasons = {int(t): "realised load off target" for t in off.index[off.to_numpy() > 0]}
    loads = rows[rows["metric"] == evidence_rules.REALISED_LOAD]
    found: dict[int, tuple[float | None, float | None]] = {}
    for trial, value, text in zip(loads["trial"], loads["value"], loads["labels"], strict=True):
        labels = labels_of(text) or {}
        target = labels.get("target")
        found.setdefault(int(trial), (float(value), float(target) if _number(target) else None))
        reason = _off_reason(float(value), labels)
        if reason is not None:
            reasons.setdefault(int(trial), reason)
    return tuple(
        FailedTrial(trial, *found.get(trial, (None, None)), reason=reasons[trial])
        for trial in sorted(reasons)
    )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def usable_rows(rows: pd.DataFrame, failed: tuple[FailedTrial, ...]) -> pd.DataFrame:
    """``rows`` without any value of a failed trial."""
    if not failed:
        return rows
    return rows[~rows["trial"].isin([f.trial for f in failed])]


def _unit(measurements: pd.DataFrame, metric: str) -> str:
    units = measurements.loc[measurements["metric"] == metric, "unit"].dropna().astype(str)
    units = units[units != ""]
    return str(units.iloc[0]) if len(units) else ""


def missing_score(condition: Condition, status: str = "missing") -> ConditionScore:
    """A condition with no values (missing) or not this evidence's to decide (other-basis)."""
    return ConditionScore(condition, (), None, None, None, None, None, False, status)


def is_never_condition(condition: Condition) -> bool:
    """Whether ``condition`` predicts an event count of zero (``metric <= 0``)."""
    return condition.op == "<=" and condition.value == 0


# Counts above this are not whole numbers a float holds exactly (2**53).
MAX_COUNT = 2.0**53


def pooled_counts(
    rows: pd.DataFrame, metric: str, trials: pd.Index, whole: float | None = None
) -> tuple[int, int] | None:
    """(successes, total) of share ``metric`` summed over ``trials``, from the counts the
    experiment recorded beside it (evidence_rules.count_metrics); None unless every one of those
    trials has both, finite and whole, with 0 <= successes <= total, some total, and (given the
    share's ``whole``: 100 for "%") the share the trial recorded equal to whole * successes /
    total: counts that disagree with the shares they stand for decide nothing."""
    successes_name, total_name = evidence_rules.count_metrics(metric)
    successes = trial_series(rows, successes_name)
    total = trial_series(rows, total_name)
    if not (set(trials) <= set(successes.index) and set(trials) <= set(total.index)):
        return None
    k = successes[trials].to_numpy(dtype=np.float64)
    n = total[trials].to_numpy(dtype=np.float64)
    if not (np.all(np.isfinite(k)) and np.all(np.isfinite(n)) and np.all(n <= MAX_COUNT)):
        return None
    if np.any(k != np.round(k)) or np.any(n != np.round(n)) or np.any(k < 0) or np.any(k > n):
        return None
    if n.sum() < 1 or n.sum() > MAX_COUNT:
        return None
    if whole is not None:
        shares = trial_series(rows, metric)[trials].to_numpy(dtype=np.float64)
        counted = np.divide(whole * k, n, out=np.full_like(k, np.nan), where=n > 0)
        recorded = n > 0  # a trial with no requests has no share to compare
        if not np.allclose(shares[recorded], counted[recorded], rtol=1e-6, atol=1e-9 * whole):
            return None
    return int(k.sum()), int(n.sum())


def _analytic_score(
    condition: Condition, values: np.ndarray, unit: str, run_id: str | None
) -> ConditionScore:
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
        ANALYTIC,
        condition.basis == "analytic",
        status,
        unit,
        1,
        run_id,
    )


def _scope_note(condition: Condition, evidence: str, scope: str, num_params: int | None) -> str:
    """Why measured ``evidence`` may not decide ``condition`` ("" when it may)."""
    if not evidence_rules.in_scope(scope, evidence):
        return f"{evidence} evidence, outside the scope ({scope})"
    if condition.model_class and not evidence_rules.in_model_class(
        condition.model_class, num_params
    ):
        size = f"a {format_params(num_params)}-parameter" if num_params else "an unknown-size"
        return f"measured on {size} model, not of the {condition.model_class} class it is about"
    return ""


def score_condition(
    condition: Condition,
    rows: pd.DataFrame,
    evidence: str,
    *,
    scope: str,
    profile: str,
    run_id: str | None = None,
    num_params: int | None = None,
    sequential: bool = False,
) -> ConditionScore:
    """Score ``condition`` on ``rows`` (one run's usable measurements of one ``evidence``
    class, from a model of ``num_params`` parameters when known). ``sequential``: the run
    chose its trial count by looking at its evidence (run --until-decided), so its intervals
    are the confidence sequences it stopped on (harness/confseq.py), not fixed-n ones."""
    series = trial_series(rows, condition.metric)
    values = series.to_numpy(dtype=np.float64)
    unit = _unit(rows, condition.metric)
    if values.size == 0:
        return missing_score(condition)
    if evidence == ANALYTIC:
        return _analytic_score(condition, values, unit, run_id)
    need = evidence_rules.min_trials(condition.metric, unit, profile)
    share = intervals.is_share(condition.metric, unit, values)
    if sequential:
        interval = confseq.sequence_interval(values, unit, share=share)
    else:
        interval = intervals.estimate_interval(values, unit, share=share)
    counts = (
        pooled_counts(rows, condition.metric, series.index, intervals.SHARE_SCALE[unit])
        if share
        else None
    )
    if counts is not None and values.size > 1:
        pooled = confseq.pooled_share_sequence if sequential else intervals.pooled_share_interval
        interval = pooled(*counts, intervals.SHARE_SCALE[unit])
    controls: tuple[float | None, ...] = ()
    if is_never_condition(condition):
        control = trial_series(rows, evidence_rules.control_metric(condition.metric))
        controls = tuple(float(control[t]) if t in control.index else None for t in series.index)
    never = is_never_condition(condition)
    if never:
        # "metric <= 0": the prediction is that an event never happens (a top-tier preemption,
        # a greedy mismatch, a compile while serving). That is an observation, not a mean to
        # estimate: one trial with an event refutes it, however few trials there are. None in
        # every trial holds only where the same measurement saw the event under a setting where
        # it can happen (the positive control) in at least the trial minimum of those trials: a
        # measurement that cannot see the event proves nothing by seeing none. The interval
        # stays the data's range.
        interval = intervals.Interval(
            float(values.mean()), float(values.min()), float(values.max()), "never"
        )
    fired = sum(1 for v in controls if v is not None and v > 0)
    if never and bool((values > 0).any()):
        status = "fails"
    elif values.size < need:
        status = "too-few-trials"
    elif never:
        status = "holds" if fired >= need else "unclear"
    elif interval.lo is None or interval.hi is None:
        status = "unclear"  # constant: identical trials give no interval to decide with
    else:
        status = interval_status(condition, interval.lo, interval.hi)
    note = _scope_note(condition, evidence, scope, num_params)
    return ConditionScore(
        condition,
        tuple(values.tolist()),
        interval.estimate,
        interval.lo,
        interval.hi,
        interval.method,
        evidence,
        condition.basis == "measured" and not note,
        status,
        unit,
        need,
        run_id,
        controls,
        note,
    )
