"""Per-tenant service from an engine's steps frame, and the service gap between backlogged
tenants.

The gap is the fairness measure of Sheng et al. (OSDI 2024): for two tenants f and g,
the largest |W_f(t1, t2) - W_g(t1, t2)| over intervals [t1, t2) in which both are
backlogged (have waiting requests), where W is service w_in * input + w_out * output,
divided by the tenant's weight. Within one stretch of joint backlog that is the range
(max - min) of the running difference of their cumulative services. The columns read
here are the ones engine/sched/fairness.py's ServiceLedger writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from claimbench.engine.sched.fairness import BACKLOG_PREFIX, INPUT_PREFIX, OUTPUT_PREFIX


def frame_tenants(steps: pd.DataFrame) -> list[str]:
    """The tenants a steps frame carries service columns for."""
    return sorted(c[len(INPUT_PREFIX) :] for c in steps.columns if c.startswith(INPUT_PREFIX))


def cumulative_service(
    steps: pd.DataFrame,
    *,
    input_weight: float,
    output_weight: float,
    tenant_weight: Callable[[str], float] | None = None,
) -> pd.DataFrame:
    """f64[num_steps, num_tenants]: w_in * input + w_out * output so far, per tenant column,
    divided by the tenant's weight when ``tenant_weight`` is given."""
    out = {}
    for t in frame_tenants(steps):
        service = input_weight * steps[INPUT_PREFIX + t].to_numpy(float) + output_weight * steps[
            OUTPUT_PREFIX + t
        ].to_numpy(float)
        out[t] = service / (tenant_weight(t) if tenant_weight is not None else 1.0)
    return pd.DataFrame(out, index=steps.index)


def max_service_gap(service: pd.DataFrame, backlogged: Mapping[str, np.ndarray]) -> float:
    """The largest service gap between two tenants over intervals in which both were
    backlogged (0 when no two tenants ever were at once).

    ``service`` is ``cumulative_service``'s frame; ``backlogged[t]`` is b[num_steps], whether
    tenant t had waiting requests when step i was scheduled. Step i's service is the increase
    from row i - 1 to row i.
    """
    tenants = list(service.columns)
    increments = service.diff().fillna(service).to_numpy(float)  # f64[num_steps, num_tenants]
    gap = 0.0
    for i, f in enumerate(tenants):
        for j in range(i + 1, len(tenants)):
            g = tenants[j]
            both = np.asarray(backlogged[f], bool) & np.asarray(backlogged[g], bool)
            delta = increments[:, i] - increments[:, j]
            gap = max(gap, _largest_range_within_runs(delta, both))
    return gap


def _largest_range_within_runs(delta: np.ndarray, mask: np.ndarray) -> float:
    """max over runs of consecutive True in ``mask`` of (max - min) of the running sum of
    ``delta`` over the run, the sum starting from 0 before the run's first step."""
    best = 0.0
    running = lo = hi = 0.0
    for d, inside in zip(delta, mask, strict=True):
        if not inside:
            running = lo = hi = 0.0
            continue
        running += d
        lo, hi = min(lo, running), max(hi, running)
        best = max(best, hi - lo)
    return best


def steps_backlog(steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """b[num_steps] per tenant: whether it was backlogged at each step."""
    return {t: steps[BACKLOG_PREFIX + t].to_numpy(bool) for t in frame_tenants(steps)}
