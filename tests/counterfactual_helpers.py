"""Reading a claim's thresholds and a tiny run's values for the counterfactual tests."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd
import pytest

from claimbench.harness.claims import Condition, find_claim, load_claims
from claimbench.harness.condition_scores import failed_trials, usable_rows

ROOT = Path(__file__).resolve().parents[1]


def condition(claim_id: str, metric: str) -> Condition:
    """The claim's condition on ``metric``, as claims.yaml states it (op and value)."""
    [found] = [c for c in find_claim(load_claims(ROOT), claim_id).prediction if c.metric == metric]
    return found


def _kept_values(frame: pd.DataFrame, metric: str) -> tuple[list[float], object]:
    """``metric``'s values in trial order from the trials the scorer would keep, and the
    trials it would not (condition_scores.failed_trials)."""
    assert len(frame[frame["metric"] == metric]), f"{metric} was not recorded"
    failed = failed_trials(frame)
    rows = usable_rows(frame, failed)
    rows = rows[rows["metric"] == metric].sort_values("trial")
    return [float(v) for v in rows["value"]], failed


def metric_values(frame: pd.DataFrame, metric: str) -> list[float]:
    """``metric``'s values in ``frame`` (a run's measurements), in trial order, from the
    trials the scorer would keep: a trial off its load target (condition_scores.failed_trials)
    did not run the design, so it cannot show the condition failing either. When no trial
    ran it (a tiny run's millisecond steps on a host busy with other work), the test is
    skipped with the trials' loads, not passed."""
    values, failed = _kept_values(frame, metric)
    if not values:
        pytest.skip(f"no trial ran the design on this host: {failed}")
    assert all(math.isfinite(v) for v in values), (metric, values)
    return values


def assert_fails(claim_id: str, metric: str, values: list[float]) -> None:
    """Every value lands on the other side of the claim's threshold on ``metric``."""
    cond = condition(claim_id, metric)
    assert values and all(math.isfinite(v) for v in values), (metric, values)
    assert not any(cond.holds(v) for v in values), (str(cond), values)


def assert_holds(claim_id: str, metric: str, values: list[float]) -> None:
    """Every value lands on the predicted side of the claim's threshold on ``metric``."""
    cond = condition(claim_id, metric)
    assert values and all(cond.holds(v) for v in values), (str(cond), values)


def assert_fails_op(claim_id: str, metric: str, op: str, values: list[float]) -> None:
    """Every value lands on the other side of the claim's ``op`` condition on ``metric`` (for a
    metric the claim bounds on both sides)."""
    claim = find_claim(load_claims(ROOT), claim_id)
    [cond] = [c for c in claim.prediction if c.metric == metric and c.op == op]
    assert values and not any(cond.holds(v) for v in values), (str(cond), values)


def usable_values(run, metric: str, minimum: int, attempts: int = 3) -> list[float]:
    """``metric``'s values from the trials the scorer would keep, over as many calls of
    ``run`` (a tiny run: returns its measurements frame) as it takes to gather ``minimum`` of
    them, at most ``attempts``: on a host busy with other tests most of a tiny run's trials
    can land off their load target, and one trial left alone is one step's hiccup away from
    any reading. Skipped, not passed, when the attempts leave fewer than ``minimum``."""
    values: list[float] = []
    for _ in range(attempts):
        values += _kept_values(run(), metric)[0]
        if len(values) >= minimum:
            return values
    pytest.skip(f"{len(values)} of {minimum} trials ran the design on this host: {values}")


def assert_median_fails(claim_id: str, metric: str, values: list[float]) -> None:
    """The median of the trials lands on the other side of the claim's threshold: for a
    tail metric a single host hiccup moves by several x in one tiny trial, so the verdict of
    the test stands on a majority of the trials agreeing."""
    cond = condition(claim_id, metric)
    assert values and all(math.isfinite(v) for v in values), (metric, values)
    assert not cond.holds(statistics.median(values)), (str(cond), values)


def assert_mean_fails(claim_id: str, metric: str, values: list[float]) -> None:
    """The trials' mean (what scoring judges) lands on the other side of the threshold: for
    a metric that timing noise on a shared host can move in a single trial."""
    cond = condition(claim_id, metric)
    mean = sum(values) / len(values)
    assert values and not cond.holds(mean), (str(cond), values)
