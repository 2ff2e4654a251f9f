"""Stored-run fixtures for the scorer, the site and the score CLI, written by write_run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from claimbench.harness import registry, results, run_checks
from claimbench.harness.claims import Claim
from claimbench.harness.results import StoredRun

# (metric, trial, value, evidence), (..., unit) or (..., unit, labels)
Row = tuple


def claim(
    scope: str = "any", conditions: list[dict] | None = None, confidence: float = 0.8, id="c"
) -> Claim:
    """A claim with one ``gain >= 1.5`` condition unless ``conditions`` are given."""
    conditions = conditions or [{"metric": "gain", "op": ">=", "value": 1.5}]
    return Claim.model_validate(
        {
            "id": id,
            "part": 1,
            "title": "t",
            "statement": "s",
            "confidence": confidence,
            "scope": scope,
            "scope_reason": "Because the mechanism is an algorithm.",
            "prediction": conditions,
            "refuted_if": "r",
        }
    )


def rows(metric: str, values, evidence: str = "cpu", unit: str = "") -> list[Row]:
    """One row per trial, trial numbers from 0."""
    return [(metric, trial, value, evidence, unit) for trial, value in enumerate(values)]


def store_run(
    results_dir: Path,
    for_claim: Claim,
    data: list[Row],
    *,
    hour: int = 10,
    profile: str = "quick",
    current: bool = True,
    origin: str | None = "host-a",
    platform: str | None = None,
    day: str = "2026-11-29",
    extra_meta: dict[str, Any] | None = None,
    root: Path | None = None,
) -> StoredRun:
    """Write one run of ``for_claim`` with ``data`` and read it back.

    ``current`` stores today's prediction hash; False stores an earlier one. ``root``: the
    claims project whose experiment's design today the run records (a placeholder without).
    The run ends at ``day``T``hour``:00 UTC and its id sorts by that time.
    """
    if platform is None:  # the hardware the rows were measured on (cpu for analytic rows alone)
        platform = next((r[3] for r in data if r[3] != "analytic"), "cpu")
    stamp = day.replace("-", "") + f"T{hour:02d}0000Z"
    run_id = f"{stamp}-{for_claim.id}-{hour:04d}"
    measurements = pd.DataFrame(
        [
            {
                "run_id": run_id,
                "claim_id": for_claim.id,
                "trial": r[1],
                "metric": r[0],
                "value": float(r[2]),
                "unit": r[4] if len(r) > 4 else "",
                "evidence": r[3],
                "labels": json.dumps(r[5]) if len(r) > 5 else "{}",
            }
            for r in data
        ],
        columns=list(results.MEASUREMENT_COLUMNS),
    )
    meta = {
        "run_id": run_id,
        "claim": for_claim.id,
        "profile": profile,
        "seed": 0,
        "trials": int(measurements["trial"].max() + 1) if len(data) else 0,
        "start": f"{day}T{hour:02d}:00:00+00:00",
        "end": f"{day}T{hour:02d}:00:00+00:00",
        "hardware": {"platform": platform, "device_kind": platform, "device_count": 1},
        # Provenance every scored run carries (harness/run_checks.py): a commit and a design.
        "git": {"sha": "d" * 40, "dirty": False},
        "prediction_hash": for_claim.prediction_hash(profile) if current else "0123456789abcdef",
        "params": for_claim.profile_params(profile),  # the ones its prediction hash names
        **({"origin": origin} if origin else {}),
        "design_hash": design_hash(root, for_claim) if root is not None else "0" * 16,
        "model": None,  # a run records the model it served (None: none, analytic rows alone)
        **(extra_meta or {}),
    }
    path = results.write_run(results_dir, meta, measurements, {})
    runs, _ = results.read_runs(results_dir)
    return next(r for r in runs if r.path == path)


def design_hash(root: Path, for_claim: Claim) -> str | None:
    """The design hash of ``for_claim``'s experiment under ``root`` today (None: it has none)."""
    return run_checks.today_designs(root, [for_claim]).get(for_claim.id)


def write_experiment(root: Path, for_claim: Claim, text: str = "def run(ctx):\n    pass\n") -> None:
    """A minimal experiment module for ``for_claim`` under ``root``, so its runs have a design."""
    path = registry.experiment_path(root, for_claim)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
