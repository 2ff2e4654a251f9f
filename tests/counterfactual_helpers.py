"""Reading a claim's thresholds and a tiny run's values for the counterfactual tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from claimbench.harness.claims import Condition, find_claim, load_claims

ROOT = Path(__file__).resolve().parents[1]


def condition(claim_id: str, metric: str) -> Condition:
    """The claim's condition on ``metric``, as claims.yaml states it (op and value)."""
    [found] = [c for c in find_claim(load_claims(ROOT), claim_id).prediction if c.metric == metric]
    return found


def metric_values(frame: pd.DataFrame, metric: str) -> list[float]:
    """``metric``'s values in ``frame`` (a run's measurements), in trial order."""
    rows = frame[frame["metric"] == metric].sort_values("trial")
    assert len(rows), f"{metric} was not recorded"
    return [float(v) for v in rows["value"]]


def assert_fails(claim_id: str, metric: str, values: list[float]) -> None:
    """Every value lands on the other side of the claim's threshold on ``metric``."""
    cond = condition(claim_id, metric)
    assert values and not any(cond.holds(v) for v in values), (str(cond), values)


def assert_holds(claim_id: str, metric: str, values: list[float]) -> None:
    """Every value lands on the predicted side of the claim's threshold on ``metric``."""
    cond = condition(claim_id, metric)
    assert values and all(cond.holds(v) for v in values), (str(cond), values)
