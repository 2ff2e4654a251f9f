"""The budget gate in front of `run`: what this machine costs, what the work would cost, and why
it must not start. `claimbench run` and the MCP run tool both ask it; only the CLI may override.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from claimbench.hardware import detection
from claimbench.harness.claims import Claim
from claimbench.harness.project_config import load_project_config
from claimbench.harness.sequential_run import BlockGate
from claimbench.ledger import budget, ledger
from claimbench.ledger.prices import MachinePrice, UnpricedError, machine_price, unpriced


@dataclass(frozen=True)
class SpendPlan:
    """The gate's answer for one batch of claims on this machine."""

    price: MachinePrice  # NaN dollars when the machine has no price (see ``unpriced_reason``)
    unpriced_reason: str | None  # why the machine has no price; None when it has one
    refusal: str | None  # why the work exceeds the budget (one line, both numbers); None if it fits
    estimated_usd: float  # the known part of the estimate (0 on an unmetered machine)
    status: budget.BudgetStatus

    @property
    def metered(self) -> bool:
        """Whether the ledger prices this work above zero (or cannot price it at all)."""
        return self.unpriced_reason is not None or self.price.usd_per_hour > 0

    @property
    def blocked(self) -> str | None:
        """The reason the work must not start without an explicit override, if any."""
        return self.unpriced_reason or self.refusal


def plan_spend(
    root: Path, store: Path, selected: list[Claim], profile: str, trials: int | None
) -> SpendPlan:
    """Price this machine and estimate ``selected`` at ``profile`` against the ledger in
    ``store``. Raises ClaimsError (claims.yaml settings) or ledger.LedgerError (a corrupt ledger)
    before any work, so bad input stops a run rather than being priced as empty."""
    config = load_project_config(root)
    rows = ledger.read_ledger(store)
    status = budget.budget_status(rows, config.budget.usd)
    hardware = detection.detect_hardware()
    try:
        price = machine_price(hardware, config.budget.prices)
    except UnpricedError as err:
        return SpendPlan(unpriced(hardware), str(err), None, 0.0, status)
    estimates = budget.estimate_claims(
        rows,
        selected,
        profile,
        trials=trials,
        hardware=hardware,
        price=price,
        settings=config.budget,
    )
    known = sum(e.usd for e in estimates if e.usd is not None)
    return SpendPlan(price, None, budget.refusal(estimates, status, price), known, status)


def block_gate(root: Path, store: Path, claim: Claim, profile: str) -> BlockGate:
    """The gate a sequential run asks before each further block of ``claim``'s trials: the
    next block's estimate plus what the run has spent so far against the remaining budget.
    Its answer is None to go on or the refusal (one line, both numbers)."""

    def ask(num_trials: int, spent_usd: float) -> str | None:
        plan = plan_spend(root, store, [claim], profile, num_trials)
        if plan.unpriced_reason is not None:
            return plan.unpriced_reason
        if plan.price.usd_per_hour <= 0:
            return None
        remaining = plan.status.remaining_usd - spent_usd
        if plan.refusal is not None or plan.estimated_usd > remaining:
            return (
                f"the next {num_trials} trial(s) of {claim.id} would cost "
                f"{budget.fmt_usd(plan.estimated_usd)} with {budget.fmt_usd(remaining)} left "
                f"(this run spent {budget.fmt_usd(spent_usd)} so far)"
            )
        return None

    return ask
