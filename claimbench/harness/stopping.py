"""The stopping rule of `run --until-decided`: when a claim's conditions are decided.

A run with a fixed trial count is scored with fixed-n intervals (harness/intervals.py). A
sequential run looks at its evidence after every block of trials and stops as soon as every
measured condition's confidence sequence (harness/confseq.py) lies wholly on one side of its
threshold, or when a cap is reached. Because a confidence sequence covers the truth at every
trial count at once, stopping on what it shows keeps the stated error rate; the run records the
rule, so scoring uses the same sequence for it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from claimbench.harness import confseq

SEQUENTIAL = "until-decided"  # a run's stopping rule, as recorded in meta.json
FIXED = "fixed"
HOLDS, FAILS, UNDECIDED = "holds", "fails", "undecided"
# Why a sequential run stopped.
STOP_DECIDED = "decided"
STOP_MAX_TRIALS = "max-trials"
STOP_MAX_MINUTES = "max-minutes"
STOP_BUDGET = "budget"
STOP_OUT_OF_SCOPE = "out-of-scope"  # this hardware cannot decide the claim: one block, indicative
STOP_REASONS = (STOP_DECIDED, STOP_MAX_TRIALS, STOP_MAX_MINUTES, STOP_BUDGET, STOP_OUT_OF_SCOPE)


@dataclass(frozen=True)
class StoppingRule:
    """When a sequential run looks at its evidence and when it gives up."""

    block_trials: int  # trials run between two looks
    max_trials: int
    max_minutes: float | None = None  # None: no time cap
    level: float = confseq.CONFIDENCE_LEVEL

    def __post_init__(self) -> None:
        if isinstance(self.block_trials, bool) or self.block_trials < 1:
            raise ValueError(f"block_trials must be >= 1, got {self.block_trials!r}")
        if isinstance(self.max_trials, bool) or self.max_trials < self.block_trials:
            raise ValueError(
                f"max_trials must be >= block_trials ({self.block_trials}), got {self.max_trials!r}"
            )
        if self.max_minutes is not None and not (
            math.isfinite(self.max_minutes) and self.max_minutes > 0
        ):
            raise ValueError(f"max_minutes must be a positive number, got {self.max_minutes!r}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1), got {self.level!r}")

    def next_block(self, trials_done: int) -> int:
        """How many trials the next block runs (0: the trial cap is reached)."""
        return max(0, min(self.block_trials, self.max_trials - trials_done))


@dataclass(frozen=True)
class Stopping:
    """What a sequential run records in meta.json under ``stopping``."""

    rule: str  # SEQUENTIAL
    block_trials: int
    max_trials: int
    max_minutes: float | None
    level: float
    num_trials: int  # trials run
    reason: str  # one of STOP_REASONS
    detail: str | None = None  # the budget gate's refusal, when that stopped it
    method: str = "gaussian-mixture confidence sequence (Lai 1976); beta-binomial for shares"

    def as_meta(self) -> dict[str, Any]:
        return asdict(self)


def side(lo: float, hi: float, op: str, threshold: float) -> str:
    """Whether an interval [lo, hi] lies wholly on the side ``op threshold`` predicts (HOLDS),
    wholly on the other side (FAILS), or straddles it (UNDECIDED)."""
    if op in (">=", ">"):
        if (lo > threshold) if op == ">" else (lo >= threshold):
            return HOLDS
        return FAILS if (hi <= threshold if op == ">" else hi < threshold) else UNDECIDED
    if op in ("<=", "<"):
        if (hi < threshold) if op == "<" else (hi <= threshold):
            return HOLDS
        return FAILS if (lo >= threshold if op == "<" else lo > threshold) else UNDECIDED
    raise ValueError(f"op must be one of >=, >, <=, <; got {op!r}")


def mean_status(
    values: np.ndarray, op: str, threshold: float, *, log_space: bool = False, level: float = 0.95
) -> str:
    """HOLDS / FAILS / UNDECIDED for trial values f64[n] by their confidence sequence.

    ``log_space``: a ratio, sequenced on its logs (as the fixed-n interval does) and compared
    with log(threshold); a ratio threshold <= 0 is below every ratio.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size < 2 or float(values.std()) == 0.0:
        return UNDECIDED  # one value, or a constant: no honest interval
    if log_space:
        if threshold <= 0:
            return HOLDS if op in (">=", ">") else FAILS
        values, threshold = np.log(values), math.log(threshold)
    _, lo, hi = confseq.t_cs(values, level)
    return side(lo, hi, op, threshold)


def trials_to_decide(
    estimate: float, sd: float, num_trials: int, threshold: float, level: float = 0.95
) -> int | None:
    """About how many trials in all would put ``threshold`` outside the confidence sequence if
    the estimate and the trial spread ``sd`` stayed as observed: the least n with
    c_n * sd / sqrt(n) < |estimate - threshold|. None when no n up to 10,000 does (too close to
    call at this precision)."""
    gap = abs(estimate - threshold)
    if not (math.isfinite(gap) and math.isfinite(sd)) or sd < 0:
        raise ValueError(f"need finite values, got estimate {estimate}, sd {sd}")
    if sd == 0:
        return None
    for n in range(max(num_trials, 2), 10_001):
        if confseq.t_cs_factor(n, level) * sd / math.sqrt(n) < gap:
            return n
    return None
