"""Trends across a run's trials: a sign the trials did not measure the same thing.

Trials of one run are replications: their values should scatter around one level. A value that
climbs or falls with the trial index (a service rate measured lower each trial because the
previous trial's estimate paced the load) says the instrument or the machine drifted, and the
interval over those trials answers a question nobody asked. The test is Mann-Kendall's: Kendall's
tau between trial index and value, its exact two-sided p-value (no ties; scipy's normal
approximation otherwise). With TREND_ALPHA = 0.05 it needs MIN_TREND_TRIALS = 5 trials to be able
to fire at all (a perfect monotone run of 5 has p = 2/120). A trend is a warning shown beside the
verdict; it does not change a condition's status.

Checked: every measured condition's metric, and every metric recorded in a rate unit
(evidence_rules.TIMING_UNITS that are rates: the service rate a load is set from) or as the
realised load.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from claimbench.harness.evidence_rules import REALISED_LOAD

TREND_ALPHA = 0.05
MIN_TREND_TRIALS = 5
RATE_UNITS = frozenset({"tok/s", "tokens/s", "req/s", "steps/s"})


@dataclass(frozen=True)
class Trend:
    """A metric whose per-trial values move monotonically with the trial index."""

    metric: str
    tau: float  # Kendall's tau against trial index, in [-1, 1]
    p_value: float  # two-sided, Mann-Kendall
    values: tuple[float, ...]  # per-trial means, in trial order

    def describe(self) -> str:
        """One line for people."""
        way = "rises" if self.tau > 0 else "falls"
        first, last = self.values[0], self.values[-1]
        return (
            f"{self.metric} {way} across trials ({first:.4g} -> {last:.4g}; Mann-Kendall "
            f"tau {self.tau:+.2f}, p {self.p_value:.3f}): the trials drifted"
        )


def trend_of(metric: str, values: np.ndarray) -> Trend | None:
    """A Trend when ``values`` f64[num_trials] (trial order) trend at TREND_ALPHA, else None."""
    values = np.asarray(values, dtype=np.float64)
    if values.size < MIN_TREND_TRIALS or np.ptp(values) == 0:
        return None
    result = stats.kendalltau(np.arange(values.size), values)
    if not np.isfinite(result.pvalue) or result.pvalue >= TREND_ALPHA:
        return None
    return Trend(metric, float(result.statistic), float(result.pvalue), tuple(values.tolist()))


def run_trends(rows: pd.DataFrame, condition_metrics: list[str]) -> tuple[Trend, ...]:
    """The trends among ``rows`` (one run's usable values of one evidence class): the condition
    metrics first, then rate and realised-load metrics, each once."""
    units = rows.groupby("metric")["unit"].first().astype(str)
    meters = sorted(m for m, u in units.items() if u in RATE_UNITS or m == REALISED_LOAD)
    found = []
    for metric in dict.fromkeys([*condition_metrics, *meters]):
        series = rows[rows["metric"] == metric].groupby("trial")["value"].mean().sort_index()
        trend = trend_of(metric, series.to_numpy(dtype=np.float64))
        if trend is not None:
            found.append(trend)
    return tuple(found)
