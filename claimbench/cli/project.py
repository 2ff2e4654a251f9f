"""Opening a claims project from the CLI: claims, runs and scores, with bad input as one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from claimbench.cli.common import err_console, fail
from claimbench.harness import registry, results, scoring
from claimbench.harness.claims import Claim, ClaimsError, load_claims

RESULTS_DIR = "results"
SITE_DIR = "site"


def open_claims(root: Path) -> list[Claim]:
    """The project's claims, or exit 2 with the loader's one-line reason."""
    try:
        return load_claims(root)
    except ClaimsError as err:
        fail(str(err))


def results_dir(root: Path, option: Path | None) -> Path:
    """``--results-dir`` if given, else ``<root>/results``."""
    return (option if option is not None else root / RESULTS_DIR).resolve()


def read_results(path: Path) -> list[results.StoredRun]:
    """The stored runs; each skipped path is reported on stderr (and left untouched)."""
    runs, skipped = results.read_runs(path)
    for item in skipped:
        err_console.print(
            f"[yellow]skipped[/] {item.path}: {item.reason}", highlight=False, soft_wrap=True
        )
    return runs


def claim_status(root: Path, score: scoring.ClaimScore) -> str:
    """What ``list`` shows: the verdict once run, else "not run" or "no experiment yet"."""
    return registry.claim_status(root, score.claim, score.verdict)


def format_estimate(cs: scoring.ConditionScore) -> str:
    """``1.93 [1.90, 1.96]`` (or "missing")."""
    if cs.estimate is None:
        return "missing"
    fmt = scoring.format_value
    return f"{fmt(cs.estimate)} [{fmt(cs.ci_lo)}, {fmt(cs.ci_hi)}]"


def group_dict(group: scoring.EvidenceScore) -> dict[str, Any]:
    """An evidence group as JSON-ready data."""
    return {
        "evidence": group.evidence,
        "run_id": group.run_id,
        "run_end": group.run_end,
        "profile": group.profile,
        "in_scope": group.in_scope,
        "verdict": group.verdict,
        "conditions": [
            {
                "condition": str(cs.condition),
                "metric": cs.condition.metric,
                "op": cs.condition.op,
                "target": cs.condition.value,
                "estimate": cs.estimate,
                "ci_lo": cs.ci_lo,
                "ci_hi": cs.ci_hi,
                "num_trials": cs.num_trials,
                "trial_values": list(cs.trial_values),
                "evidence": cs.evidence,
                "status": cs.status,
            }
            for cs in group.conditions
        ],
    }


def score_dict(root: Path, score: scoring.ClaimScore) -> dict[str, Any]:
    """A claim's score as JSON-ready data."""
    return {
        "id": score.claim.id,
        "confidence": score.claim.confidence,
        "scope": score.claim.scope,
        "status": claim_status(root, score),
        "verdict": score.verdict,
        "headline_evidence": score.headline.evidence if score.headline else None,
        "groups": [group_dict(g) for g in score.groups],
    }


def calibration_dict(cal: scoring.Calibration) -> dict[str, Any]:
    """Calibration as JSON-ready data."""
    return {
        "num_decided": cal.num_decided,
        "brier": cal.brier,
        "coin_brier": cal.coin_brier,
        "log_score": cal.log_score,
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
