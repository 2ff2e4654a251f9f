"""scores.parquet: every claim's scores as one flat table."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from claimbench.harness.scoring import ClaimScore, ConditionScore, EvidenceGroup, RunScore

COLUMNS = (
    "claim_id",
    "verdict",  # the claim's verdict
    "decided",  # counted by calibration: decided on in-scope evidence of each basis
    "deciding_evidence",  # the class whose value decides (or shows) this condition for the claim
    "evidence",  # this row's evidence group: cpu | gpu | tpu | analytic
    "in_scope",
    "run_id",
    "current",  # passes every run check (harness/run_checks.py): may be scored
    "exclusion",  # why it may not be scored (run_checks.EXCLUSIONS), or None
    "num_failed_trials",  # trials off their realised-load target, dropped before scoring
    "scored",  # this run is its group's scored run (the newest current one)
    "headline",  # this run gives the claim's verdict
    "run_verdict",  # the run's own verdict
    "num_runs",  # runs in the group (replications), runs not scored included
    "num_current",  # of which may be scored (harness/run_checks.py)
    "num_agree",  # current runs agreeing with the scored run's verdict
    "profile",
    "run_end",
    "origin",
    "hardware",
    "model",
    "metric",
    "basis",
    "op",
    "target",
    "estimate",
    "ci_lo",
    "ci_hi",
    "interval",  # intervals.METHODS | exact | inconsistent
    "constant",
    "num_trials",
    "min_trials",
    "condition_status",
    "value_evidence",  # the class this row's value came from
    "scope_note",  # why this value may not decide the condition (hardware or model class)
    "control_fired",  # a never condition's trials whose positive control saw the event
)


def _number(x: float | None) -> float:
    return math.nan if x is None else x


def _row(
    score: ClaimScore, group: EvidenceGroup | None, run: RunScore | None, i: int
) -> dict[str, Any]:
    condition = score.claim.prediction[i]
    cs: ConditionScore | None = run.conditions[i] if run else None
    info = run.info if run else None
    return {
        "claim_id": score.claim.id,
        "verdict": score.verdict,
        "decided": score.decided,
        "deciding_evidence": score.conditions[i].evidence,
        "evidence": group.evidence if group else None,
        "in_scope": group.in_scope if group else False,
        "run_id": info.run_id if info else None,
        "current": bool(run and run.current),
        "exclusion": run.exclusion if run else None,
        "num_failed_trials": len(run.failed_trials) if run else 0,
        "scored": bool(run and group and run is group.scored),
        "headline": bool(run and run is score.headline),
        "run_verdict": run.verdict if run else None,
        "num_runs": len(group.runs) if group else 0,
        "num_current": len(group.current_runs) if group else 0,
        "num_agree": group.num_agree if group else 0,
        "profile": info.profile if info else None,
        "run_end": info.end if info else None,
        "origin": info.origin if info else None,
        "hardware": info.hardware_label if info else None,
        "model": info.model_label if info else None,
        "metric": condition.metric,
        "basis": condition.basis,
        "op": condition.op,
        "target": condition.value,
        "estimate": _number(cs.estimate if cs else None),
        "ci_lo": _number(cs.ci_lo if cs else None),
        "ci_hi": _number(cs.ci_hi if cs else None),
        "interval": cs.method if cs else None,
        "constant": bool(cs and cs.constant),
        "num_trials": cs.num_trials if cs else 0,
        "min_trials": cs.min_trials if cs else 0,
        "condition_status": cs.status if cs else "missing",
        "value_evidence": cs.evidence if cs else None,
        "scope_note": cs.scope_note if cs else "",
        "control_fired": cs.num_control_fired if cs else 0,
    }


def scores_frame(scores: list[ClaimScore]) -> pd.DataFrame:
    """One row per (claim, evidence group, run, condition): every replication is kept, with
    ``scored`` marking the run each group is scored on. A claim without runs gets one row per
    condition with no evidence."""
    rows = []
    for score in scores:
        pairs = [(g, r) for g in score.groups for r in g.runs] or [(None, None)]
        for group, run in pairs:
            rows.extend(_row(score, group, run, i) for i in range(len(score.claim.prediction)))
    return pd.DataFrame(rows, columns=list(COLUMNS))
