"""Spend against the budget, the cost estimate `run` checks before it starts, and $/Mtok.

Estimates come from the ledger first: earlier runs of the same claim and profile on the same
chip type and count, as the median device seconds per trial times the trials asked for. A claim
never run there takes its declared estimate (claims.yaml ``budget.estimate_device_s``), scaled
from the profile's trials to the trials asked for. The machine's current price turns seconds
into dollars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from claimbench.harness.claims import Claim
from claimbench.harness.context import DEFAULT_TRIALS
from claimbench.harness.project_config import BudgetSettings
from claimbench.ledger.prices import MachinePrice

TOKENS_PER_MTOK = 1e6


@dataclass(frozen=True)
class BudgetStatus:
    """What the ledger says was spent, against the budget."""

    budget_usd: float
    spent_usd: float  # priced runs only
    num_runs: int
    device_s: float  # every row's, CPU runs included
    num_unpriced: int = 0  # runs on accelerators without a price: not in spent_usd
    unpriced_device_s: float = 0.0

    @property
    def remaining_usd(self) -> float:
        return self.budget_usd - self.spent_usd


def budget_status(ledger: pd.DataFrame, budget_usd: float) -> BudgetStatus:
    """Spend so far, from the ledger's rows."""
    missing = ledger["usd"].isna()
    return BudgetStatus(
        budget_usd=budget_usd,
        spent_usd=float(ledger["usd"].sum()),
        num_runs=len(ledger),
        device_s=float(ledger["device_s"].sum()),
        num_unpriced=int(missing.sum()),
        unpriced_device_s=float(ledger.loc[missing, "device_s"].sum()),
    )


@dataclass(frozen=True)
class Estimate:
    """The expected cost of one claim's run on this machine."""

    claim_id: str
    device_s: float | None  # None: no earlier run here and nothing declared
    usd: float | None
    basis: str  # "ledger (N runs)" | "declared" | "none"


def estimate_run(
    ledger: pd.DataFrame,
    claim_id: str,
    profile: str,
    *,
    hardware_class: str,
    chip: str,
    price: MachinePrice,
    trials: int,
    profile_trials: int,
    settings: BudgetSettings,
) -> Estimate:
    """The cost of running ``claim_id`` at ``profile`` for ``trials`` trials on this machine.

    ``profile_trials`` is the trial count the profile runs by default: what a declared estimate
    stands for.
    """
    earlier = ledger[
        (ledger["claim_id"] == claim_id)
        & (ledger["profile"] == profile)
        & (ledger["hardware_class"] == hardware_class)
        & (ledger["chip"] == chip)
        & (ledger["num_chips"] == price.num_chips)
    ]
    if len(earlier):
        per_trial = float((earlier["device_s"] / earlier["trials"]).median())
        device_s = per_trial * trials
        basis = f"ledger ({len(earlier)} run{'s' if len(earlier) > 1 else ''})"
    else:
        declared = settings.declared_device_s(claim_id, profile)
        if declared is None:
            return Estimate(claim_id, None, None, "none")
        device_s = declared * trials / profile_trials
        basis = "declared"
    return Estimate(claim_id, device_s, price.cost_usd(device_s), basis)


def per_mtok_table(ledger: pd.DataFrame) -> pd.DataFrame:
    """Dollars per million generated tokens per claim and hardware, at the utilization the runs
    actually had: all the device seconds they held, idle and compile time included.

    Columns: claim_id, hardware_class, chip, num_runs, device_s, usd, output_tokens,
    tokens_per_s, usd_per_mtok (NaN where a claim's runs served no tokens).
    """
    columns = ["claim_id", "hardware_class", "chip"]
    grouped = ledger.groupby(columns, sort=True).agg(
        num_runs=("run_id", "count"),
        device_s=("device_s", "sum"),
        # NaN when the group's runs were unpriced, rather than a $0 that reads as free.
        usd=("usd", lambda usd: usd.sum(min_count=1)),
        output_tokens=("output_tokens", "sum"),
    )
    table = grouped.reset_index()
    tokens = table["output_tokens"].astype("float64")
    table["tokens_per_s"] = tokens / table["device_s"].where(table["device_s"] > 0)
    table["usd_per_mtok"] = table["usd"] / (tokens / TOKENS_PER_MTOK).where(tokens > 0)
    return table


def fmt_usd(value: float | None) -> str:
    """Dollars as the CLI and site print them: cents, or '-' for unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def estimate_claims(
    ledger: pd.DataFrame,
    claims: list[Claim],
    profile: str,
    *,
    trials: int | None,
    hardware: dict[str, Any],
    price: MachinePrice,
    settings: BudgetSettings,
) -> list[Estimate]:
    """estimate_run for each claim `run` was asked to run (``trials`` None: each profile's)."""
    chip = hardware.get("chip") or hardware.get("device_kind") or hardware["platform"]
    estimates = []
    for claim in claims:
        profile_trials = int(claim.profile_params(profile).get("trials", DEFAULT_TRIALS))
        estimates.append(
            estimate_run(
                ledger,
                claim.id,
                profile,
                hardware_class=hardware["platform"],
                chip=chip,
                price=price,
                trials=trials if trials is not None else profile_trials,
                profile_trials=profile_trials,
                settings=settings,
            )
        )
    return estimates


def refusal(estimates: list[Estimate], status: BudgetStatus, price: MachinePrice) -> str | None:
    """Why `run` must not start this work (one line naming both numbers), or None when it fits.

    Work on an unmetered machine (a CPU) always fits; on a metered one, a claim without any
    estimate is refused too, since its cost cannot be bounded.
    """
    if price.usd_per_hour == 0:
        return None
    unknown = [e.claim_id for e in estimates if e.usd is None]
    if unknown:
        return (
            f"no cost estimate for {', '.join(unknown)} at {price.usd_per_hour:.2f} USD/hour: "
            "no earlier run on this hardware and no claims.yaml budget.estimate_device_s entry"
        )
    total = sum(e.usd for e in estimates if e.usd is not None)
    if total > status.remaining_usd:
        return (
            f"estimated cost {fmt_usd(total)} exceeds the remaining budget "
            f"{fmt_usd(status.remaining_usd)} (of {fmt_usd(status.budget_usd)}); "
            "--over-budget runs it anyway"
        )
    return None
