"""Scores as text and JSON-ready data for `score`, `show` and `list`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from claimbench.cli.project import claim_status
from claimbench.harness import deciding, scoring
from claimbench.harness.calibration import Calibration
from claimbench.harness.run_info import RunInfo


def format_estimate(cs: scoring.ConditionScore) -> str:
    """``1.93 [1.90, 1.96]``, ``1.94 exact``, ``1.9 constant across trials`` or "missing"."""
    if cs.estimate is None:
        return "missing" if cs.status != "other-basis" else "-"
    fmt = scoring.format_value
    if cs.method == "exact":
        return f"{fmt(cs.estimate)} exact"
    if cs.constant:
        return f"{fmt(cs.estimate)} constant across trials"
    if cs.ci_lo is None:
        return f"{fmt(cs.estimate)} (one trial)"
    return f"{fmt(cs.estimate)} [{fmt(cs.ci_lo)}, {fmt(cs.ci_hi)}]"


def run_label(info: RunInfo) -> str:
    """``cpu · AMD EPYC · claimbench-tiny @3f2a9c1d · quick · 5 trials · 2026-11-29 · host``."""
    trials = f"{info.trials} trials" if info.trials is not None else "trials unknown"
    origin = info.origin or "origin unknown"
    return " · ".join(
        (info.hardware_label, info.model_label, info.profile, trials, info.date, origin)
    )


def info_dict(info: RunInfo) -> dict[str, Any]:
    """A run's provenance as JSON-ready data (None where the run did not record it)."""
    return {
        "run_id": info.run_id,
        "run_end": info.end,
        "profile": info.profile,
        "trials": info.trials,
        "origin": info.origin,
        "platform": info.platform,
        "hardware": info.hardware,
        "model": info.model_name,
        "model_sha": info.model_sha,
        "model_params": info.model_params,
        "git_sha": info.git_sha,
        "prediction_hash": info.prediction_hash,
    }


def condition_dict(cs: scoring.ConditionScore) -> dict[str, Any]:
    """One condition's score as JSON-ready data."""
    return {
        "condition": str(cs.condition),
        "metric": cs.condition.metric,
        "basis": cs.condition.basis,
        "op": cs.condition.op,
        "target": cs.condition.value,
        "estimate": cs.estimate,
        "ci_lo": cs.ci_lo,
        "ci_hi": cs.ci_hi,
        "interval": cs.method,
        "constant": cs.constant,
        "unit": cs.unit,
        "num_trials": cs.num_trials,
        "min_trials": cs.min_trials,
        "trial_values": list(cs.trial_values),
        "evidence": cs.evidence,
        "in_scope": cs.in_scope,
        "run_id": cs.run_id,
        "status": cs.status,
        "scope_note": cs.scope_note,
        "model_class": cs.condition.model_class,
        "control_values": list(cs.control_values),
        "num_control_fired": cs.num_control_fired,
    }


def run_dict(run: scoring.RunScore, group: scoring.EvidenceGroup) -> dict[str, Any]:
    """One replication: its provenance, whether it is scored, its own verdict."""
    return info_dict(run.info) | {
        "current": run.current,
        "exclusion": run.exclusion,
        "scored": run is group.scored,
        "verdict": run.verdict,
        "failed_trials": [
            {"trial": f.trial, "realised_load": f.realised_load, "target": f.target}
            for f in run.failed_trials
        ],
        "conditions": [condition_dict(cs) for cs in run.conditions],
    }


def group_dict(group: scoring.EvidenceGroup) -> dict[str, Any]:
    """An evidence group (one hardware class, or analytic) as JSON-ready data."""
    scored = group.scored
    return {
        "evidence": group.evidence,
        "in_scope": group.in_scope,
        "scored_run": scored.run_id if scored else None,
        "verdict": scored.verdict if scored else None,
        "num_runs": len(group.runs),
        "num_current": len(group.current_runs),
        "num_agree": group.num_agree,
        "runs": [run_dict(r, group) for r in group.runs],
    }


def score_dict(root: Path, score: scoring.ClaimScore) -> dict[str, Any]:
    """A claim's score as JSON-ready data."""
    return {
        "id": score.claim.id,
        "confidence": score.claim.confidence,
        "scope": score.claim.scope,
        "scope_reason": score.claim.scope_reason,
        "status": claim_status(root, score),
        "verdict": score.verdict,
        "decided": score.decided,
        "headline_evidence": score.headline.evidence if score.headline else None,
        "shown_run": info_dict(score.shown.info) if score.shown else None,
        "conditions": [condition_dict(cs) for cs in score.conditions],
        "decided_by_measurement": score.decided_by_measurement,
        "num_not_scored_runs": score.num_earlier,
        "not_scored": score.exclusion_counts(),
        "disagreeing_classes": {
            g.evidence: g.scored.verdict for g in score.disagreements if g.scored is not None
        },
        "groups": [group_dict(g) for g in score.groups],
        "indicative_reason": deciding.indicative_reason(score) or None,
        "warnings": list(score.trend_warnings),
        "what_decides": _deciding_dict(deciding.what_decides(score.claim)),
        "trials_needed": [
            {
                "metric": t.metric,
                "num_trials": t.num_trials,
                "estimate": t.estimate,
                "threshold": t.threshold,
                "sd": t.sd,
                "log_space": t.log_space,
                "trials_in_all": t.needed,
                "too_close_to_call": t.too_close,
                "calculation": t.describe(),
            }
            for t in deciding.trials_needed(score)
        ],
    }


def _deciding_dict(d: deciding.Deciding) -> dict[str, Any]:
    return {
        "hardware": list(d.hardware),
        "model_classes": list(d.model_classes),
        "command": d.command,
    }


def calibration_dict(cal: Calibration) -> dict[str, Any]:
    """Calibration as JSON-ready data."""
    return {
        "num_decided": cal.num_decided,
        "num_analytic_only": cal.num_analytic_only,
        "brier": cal.brier,
        "brier_ci": list(cal.brier_ci) if cal.brier_ci else None,
        "coin_brier": cal.coin_brier,
        "log_score": cal.log_score,
        "log_score_ci": list(cal.log_score_ci) if cal.log_score_ci else None,
        "coin_log_score": cal.coin_log_score,
        "bins": [
            {
                "lo": b.lo,
                "hi": b.hi,
                "count": b.count,
                "mean_confidence": b.mean_confidence,
                "observed_rate": b.observed_rate,
            }
            for b in cal.bins
        ],
    }
