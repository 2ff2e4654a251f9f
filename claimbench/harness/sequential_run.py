"""Running one claim's experiment a block of trials at a time until its conditions are decided.

The experiment's ``run(ctx)`` is called once per block with ``ctx.trials`` set to the block's
size and ``ctx.trial_offset`` to the trials already run, so its trial loop and its records need
no change: trial t of a block is stored as trial offset + t, and the block's seed is the run's
seed + offset (a block's trial t draws what trial offset + t of one long run would). After each
block every measured condition is looked at through its confidence sequence
(harness/stopping.py); the run stops once each lies wholly on one side of its threshold, on the
trial or time cap, when the budget gate refuses the next block, or after the first block when
this hardware is outside the claim's scope (no number of its trials could decide it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

import pandas as pd

from claimbench.harness import evidence_rules, stopping
from claimbench.harness.claims import Claim
from claimbench.harness.condition_scores import failed_trials, trial_values, usable_rows

if TYPE_CHECKING:  # context.run_claim calls run_blocks
    from claimbench.harness.context import RunContext

# The budget gate's answer for the next block: (its size, dollars this run has spent so far)
# -> None to go on, or the reason to stop.
BlockGate = Callable[[int, float], str | None]


def condition_statuses(claim: Claim, rows: pd.DataFrame, level: float) -> dict[str, str]:
    """Each measured condition's side of its threshold by its confidence sequence, keyed by
    ``metric op value``, from the measured rows so far (failed trials dropped)."""
    measured = rows[rows["evidence"] != evidence_rules.ANALYTIC]
    measured = usable_rows(measured, failed_trials(measured))
    statuses: dict[str, str] = {}
    for condition in claim.prediction:
        if condition.basis != "measured":
            continue
        key = f"{condition.metric} {condition.op} {condition.value:g}"
        values = trial_values(measured, condition.metric)
        units = measured.loc[measured["metric"] == condition.metric, "unit"].astype(str)
        ratio = bool(len(units)) and units.iloc[0] == "x" and bool((values > 0).all())
        statuses[key] = stopping.mean_status(
            values, condition.op, condition.value, log_space=ratio, level=level
        )
    return statuses


def run_blocks(
    ctx: RunContext,
    module: ModuleType,
    claim: Claim,
    rule: stopping.StoppingRule,
    *,
    gate: BlockGate | None = None,
    price_per_hour: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
) -> stopping.Stopping:
    """Run ``module`` on ``ctx`` block by block under ``rule``; return what the run records.

    ``ctx.trials`` and ``ctx.trial_offset`` are set per block; ``ctx.progress`` counts over
    ``rule.max_trials``. ``price_per_hour`` prices the time spent so far for the gate.
    """
    start = clock()
    base_seed = ctx.seed
    done = 0
    in_scope = evidence_rules.in_scope(claim.scope, ctx.evidence)
    reason, detail = stopping.STOP_MAX_TRIALS, None
    while (size := rule.next_block(done)) > 0:
        if done and gate is not None:
            spent = (clock() - start) * price_per_hour / 3600.0
            detail = gate(size, spent)
            if detail is not None:
                reason = stopping.STOP_BUDGET
                break
        ctx.trials, ctx.trial_offset, ctx.seed = size, done, base_seed + done
        module.run(ctx)
        done += size
        ctx.progress.reach(done)
        if not in_scope:
            reason = stopping.STOP_OUT_OF_SCOPE
            break
        statuses = condition_statuses(claim, ctx.measurements_frame("sequential"), rule.level)
        if statuses and all(s != stopping.UNDECIDED for s in statuses.values()):
            reason = stopping.STOP_DECIDED
            break
        if rule.max_minutes is not None and clock() - start >= rule.max_minutes * 60:
            reason = stopping.STOP_MAX_MINUTES
            break
    ctx.trials, ctx.trial_offset, ctx.seed = max(done, 1), 0, base_seed
    return stopping.Stopping(
        rule=stopping.SEQUENTIAL,
        block_trials=rule.block_trials,
        max_trials=rule.max_trials,
        max_minutes=rule.max_minutes,
        level=rule.level,
        num_trials=done,
        reason=reason,
        detail=detail,
    )
