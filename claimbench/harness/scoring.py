"""Scoring: per-condition estimates with bootstrap CIs, verdicts, and calibration.

Evidence is grouped per (claim, hardware class). For each group the most recent run holding that
class's measurements is scored: each condition's metric is reduced to one value per trial (the mean
of that trial's values), estimated by the mean over trials, with a seeded percentile bootstrap 95%
CI. A measured group (cpu | gpu | tpu) falls back on the same run's analytic values for a metric it
did not measure, since analytic evidence is valid on any hardware.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from claimbench.harness.claims import Claim, Condition
from claimbench.harness.results import StoredRun

MIN_TRIALS = 3
CONFIDENCE_LEVEL = 0.95
NUM_RESAMPLES = 2000
COIN_BRIER = 0.25  # Brier score of always saying 0.5
COIN_LOG_SCORE = math.log(0.5)  # log score of always saying 0.5
MEASURED = ("tpu", "gpu", "cpu")
IN_SCOPE = {
    "any": {"cpu", "gpu", "tpu", "analytic"},
    "accelerator": {"gpu", "tpu", "analytic"},
    "tpu": {"tpu", "analytic"},
}
VERDICTS = ("confirmed", "refuted", "inconclusive", "indicative-only", "not-run")
DECIDED = ("confirmed", "refuted")


@dataclass(frozen=True)
class ConditionScore:
    """One condition's estimate from one evidence group."""

    condition: Condition
    trial_values: tuple[float, ...]  # one per trial, in trial order
    estimate: float | None  # mean over trials; None when the metric is missing
    ci_lo: float | None
    ci_hi: float | None
    evidence: str | None  # the class the values came from (may be "analytic" in a measured group)
    status: str  # holds | fails | unclear | too-few-trials | missing

    @property
    def num_trials(self) -> int:
        return len(self.trial_values)


@dataclass(frozen=True)
class EvidenceScore:
    """A claim scored on one hardware class's evidence, from that class's latest run."""

    evidence: str  # cpu | gpu | tpu | analytic
    run_id: str
    run_end: str  # ISO time the run finished
    profile: str
    in_scope: bool
    conditions: tuple[ConditionScore, ...]
    verdict: str  # confirmed | refuted | inconclusive


@dataclass(frozen=True)
class ClaimScore:
    """A claim's headline verdict and every evidence group behind it."""

    claim: Claim
    verdict: str  # one of VERDICTS
    headline: EvidenceScore | None  # the in-scope group the verdict comes from
    groups: tuple[EvidenceScore, ...]  # every evidence class with runs, measured first

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED


@dataclass(frozen=True)
class ReliabilityBin:
    """Decided claims whose stated confidence fell in [lo, hi)."""

    lo: float
    hi: float
    count: int
    mean_confidence: float
    observed_rate: float  # fraction confirmed


@dataclass(frozen=True)
class Calibration:
    """How well stated confidences matched outcomes over the decided claims."""

    num_decided: int
    brier: float | None  # mean (p - outcome)^2; lower is better, COIN_BRIER for always 0.5
    log_score: float | None  # mean ln(p if confirmed else 1 - p); higher is better, 0 is perfect
    bins: tuple[ReliabilityBin, ...]
    coin_brier: float = COIN_BRIER


def bootstrap_ci(
    values: np.ndarray, *, seed: int = 0, num_resamples: int = NUM_RESAMPLES
) -> tuple[float, float]:
    """Percentile bootstrap CONFIDENCE_LEVEL interval of the mean of ``values`` f64[n], n >= 1."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {values.shape}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.size, size=(num_resamples, values.size))
    means = values[picks].mean(axis=1)
    tail = (1.0 - CONFIDENCE_LEVEL) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    # A mean never leaves the data's range; clipping removes float drift (mean of [1.9] * 3 is
    # 1.8999999999999997), which would otherwise move a CI off a threshold it sits on.
    low, high = values.min(), values.max()
    return float(np.clip(lo, low, high)), float(np.clip(hi, low, high))


def interval_status(condition: Condition, lo: float, hi: float) -> str:
    """holds: [lo, hi] wholly on the predicted side; fails: wholly on the wrong side; else
    unclear."""
    if condition.holds(lo) and condition.holds(hi):
        return "holds"
    if not condition.holds(lo) and not condition.holds(hi):
        # Both ends wrong: for a one-sided threshold the whole interval is on the wrong side.
        return "fails"
    return "unclear"


def trial_values(measurements: pd.DataFrame, metric: str) -> np.ndarray:
    """f64[num_trials]: the mean of each trial's values of ``metric``, in trial order."""
    rows = measurements[measurements["metric"] == metric]
    return rows.groupby("trial")["value"].mean().sort_index().to_numpy(dtype=np.float64)


def score_condition(
    condition: Condition, values: np.ndarray, evidence: str | None, *, seed: int = 0
) -> ConditionScore:
    """Estimate one condition from its per-trial values f64[num_trials] (may be empty)."""
    if values.size == 0:
        return ConditionScore(condition, (), None, None, None, None, "missing")
    lo, hi = bootstrap_ci(values, seed=seed)
    status = interval_status(condition, lo, hi) if values.size >= MIN_TRIALS else "too-few-trials"
    return ConditionScore(
        condition, tuple(values.tolist()), float(values.mean()), lo, hi, evidence, status
    )


def group_verdict(conditions: tuple[ConditionScore, ...]) -> str:
    """confirmed if every condition holds; inconclusive if any lacks data (missing or fewer than
    MIN_TRIALS trials); refuted if some condition fails; inconclusive otherwise."""
    statuses = [c.status for c in conditions]
    if any(s in ("missing", "too-few-trials") for s in statuses):
        return "inconclusive"
    if all(s == "holds" for s in statuses):
        return "confirmed"
    if any(s == "fails" for s in statuses):
        return "refuted"
    return "inconclusive"


def score_group(claim: Claim, evidence: str, run: StoredRun, *, seed: int = 0) -> EvidenceScore:
    """Score ``claim`` on ``run``'s measurements of one evidence class."""
    rows = run.measurements[run.measurements["claim_id"] == claim.id]
    own = rows[rows["evidence"] == evidence]
    analytic = rows[rows["evidence"] == "analytic"]
    conditions = []
    for condition in claim.prediction:
        values, source = trial_values(own, condition.metric), evidence
        if values.size == 0 and evidence in MEASURED:
            values, source = trial_values(analytic, condition.metric), "analytic"
        conditions.append(score_condition(condition, values, source, seed=seed))
    conditions_t = tuple(conditions)
    return EvidenceScore(
        evidence=evidence,
        run_id=run.run_id,
        run_end=str(run.meta.get("end", "")),
        profile=str(run.meta.get("profile", "")),
        in_scope=evidence in IN_SCOPE[claim.scope],
        conditions=conditions_t,
        verdict=group_verdict(conditions_t),
    )


def score_claim(claim: Claim, runs: list[StoredRun], *, seed: int = 0) -> ClaimScore:
    """The claim's verdict from ``runs`` (any order; other claims' runs are ignored).

    Headline: the in-scope groups, measured preferred over analytic, then the most recent run.
    With only out-of-scope evidence the verdict is indicative-only; with none, not-run.
    """
    metrics = {condition.metric for condition in claim.prediction}
    latest: dict[str, StoredRun] = {}
    for run in sorted(runs, key=lambda r: r.run_id):
        if run.claim_id != claim.id:
            continue
        m = run.measurements
        # Only values of the predicted metrics are evidence; side metrics (byte counts behind a
        # ratio, say) recorded as analytic must not open an analytic group of their own.
        relevant = m[(m["claim_id"] == claim.id) & m["metric"].isin(metrics)]
        for evidence in relevant["evidence"].unique():
            latest[str(evidence)] = run
    order = [*MEASURED, "analytic"]
    groups = tuple(
        score_group(claim, evidence, latest[evidence], seed=seed)
        for evidence in sorted(latest, key=lambda e: order.index(e) if e in order else len(order))
    )
    if not groups:
        return ClaimScore(claim, "not-run", None, groups)
    in_scope = [g for g in groups if g.in_scope]
    if not in_scope:
        return ClaimScore(claim, "indicative-only", None, groups)
    measured = [g for g in in_scope if g.evidence != "analytic"] or in_scope
    headline = max(measured, key=lambda g: g.run_id)
    return ClaimScore(claim, headline.verdict, headline, groups)


def score_claims(claims: list[Claim], runs: list[StoredRun], *, seed: int = 0) -> list[ClaimScore]:
    """Every claim's score, in the claims file's order."""
    return [score_claim(claim, runs, seed=seed) for claim in claims]


def brier_score(confidences: np.ndarray, outcomes: np.ndarray) -> float:
    """Mean squared error of stated probabilities f64[n] against outcomes {0, 1}[n]."""
    confidences, outcomes = _check_forecasts(confidences, outcomes)
    return float(np.mean((confidences - outcomes) ** 2))


def log_score(confidences: np.ndarray, outcomes: np.ndarray) -> float:
    """Mean natural-log probability given to what happened (0 is perfect, ln 0.5 a coin)."""
    confidences, outcomes = _check_forecasts(confidences, outcomes)
    return float(np.mean(np.log(np.where(outcomes == 1, confidences, 1.0 - confidences))))


def reliability_bins(
    confidences: np.ndarray, outcomes: np.ndarray, *, num_bins: int = 10
) -> tuple[ReliabilityBin, ...]:
    """Equal-width bins over [0, 1] of stated confidence; only non-empty bins are returned."""
    confidences, outcomes = _check_forecasts(confidences, outcomes)
    # Rounded first so a confidence on a bin edge (0.7 * 10 = 7.000000000000001) lands in the
    # bin it names whatever the float error.
    index = np.minimum(np.floor(np.round(confidences * num_bins, 9)).astype(int), num_bins - 1)
    bins = []
    for b in range(num_bins):
        mask = index == b
        if mask.any():
            bins.append(
                ReliabilityBin(
                    lo=b / num_bins,
                    hi=(b + 1) / num_bins,
                    count=int(mask.sum()),
                    mean_confidence=float(confidences[mask].mean()),
                    observed_rate=float(outcomes[mask].mean()),
                )
            )
    return tuple(bins)


def _check_forecasts(confidences: np.ndarray, outcomes: np.ndarray) -> tuple[np.ndarray, ...]:
    confidences = np.asarray(confidences, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    if confidences.shape != outcomes.shape or confidences.ndim != 1 or confidences.size == 0:
        raise ValueError(
            f"need two equal non-empty 1-D arrays, got {confidences.shape} and {outcomes.shape}"
        )
    if not np.all((confidences > 0) & (confidences < 1)):
        raise ValueError(f"confidences must lie in (0, 1), got {confidences.tolist()}")
    if not np.all((outcomes == 0) | (outcomes == 1)):
        raise ValueError(f"outcomes must be 0 or 1, got {outcomes.tolist()}")
    return confidences, outcomes


def calibration(scores: list[ClaimScore]) -> Calibration:
    """Brier, log score and reliability bins over the decided claims (confirmed = 1)."""
    decided = [s for s in scores if s.decided]
    if not decided:
        return Calibration(num_decided=0, brier=None, log_score=None, bins=())
    confidences = np.array([s.claim.confidence for s in decided])
    outcomes = np.array([1.0 if s.verdict == "confirmed" else 0.0 for s in decided])
    return Calibration(
        num_decided=len(decided),
        brier=brier_score(confidences, outcomes),
        log_score=log_score(confidences, outcomes),
        bins=reliability_bins(confidences, outcomes),
    )


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


def _number(x: float | None) -> float:
    return math.nan if x is None else x


def scores_frame(scores: list[ClaimScore]) -> pd.DataFrame:
    """One row per (claim, evidence class, condition); a not-run claim gets rows with no evidence.

    Columns: claim_id, verdict (headline), headline (this group gives it), evidence, run_id,
    profile, run_end, group_verdict, metric, op, target, estimate, ci_lo, ci_hi, num_trials,
    condition_status, value_evidence.
    """
    rows = []
    for score in scores:
        groups = score.groups or (None,)
        for group in groups:
            for i, condition in enumerate(score.claim.prediction):
                cs = group.conditions[i] if group is not None else None
                rows.append(
                    {
                        "claim_id": score.claim.id,
                        "verdict": score.verdict,
                        "headline": group is not None and group is score.headline,
                        "evidence": group.evidence if group else None,
                        "run_id": group.run_id if group else None,
                        "profile": group.profile if group else None,
                        "run_end": group.run_end if group else None,
                        "group_verdict": group.verdict if group else None,
                        "metric": condition.metric,
                        "op": condition.op,
                        "target": condition.value,
                        "estimate": _number(cs.estimate if cs else None),
                        "ci_lo": _number(cs.ci_lo if cs else None),
                        "ci_hi": _number(cs.ci_hi if cs else None),
                        "num_trials": cs.num_trials if cs else 0,
                        "condition_status": cs.status if cs else "missing",
                        "value_evidence": cs.evidence if cs else None,
                    }
                )
    return pd.DataFrame(rows)
