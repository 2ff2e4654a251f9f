"""What an hour of a chip costs, with where the number came from: the ledger's price column.

List prices are Google Cloud's on-demand rates (us-central regions) as entered in the chip
spec table (hardware/chips.py); claims.yaml ``budget.prices`` overrides them per chip, and the
environment variable CLAIMBENCH_PRICE_PER_HOUR (hardware.PRICE_ENV_VAR) overrides both with a
whole-machine price. A CPU is not metered: $0. An accelerator with no price is an error, never
a silent $0: a budget that cannot price a run cannot protect itself from it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import date
from typing import Any

from claimbench.hardware.chips import PRICE_ENV_VAR, get_chip
from claimbench.harness.project_config import DeclaredPrice

TPU_PRICING_URL = "https://cloud.google.com/tpu/pricing"
# When the spec table's TPU prices were read from the pricing page.
_LIST_PRICES_AS_OF = date(2026, 11, 29)
_LIST_PRICED_CHIPS = ("v5e", "v6e", "v5p")
CPU_SOURCE = "cpu: not metered"
UNPRICED_SOURCE = "unpriced"


class UnpricedError(ValueError):
    """An accelerator the table, claims.yaml and the environment give no price for."""


@dataclass(frozen=True)
class MachinePrice:
    """The price of the machine a run used: USD per hour for all its chips."""

    usd_per_chip_hour: float
    num_chips: int
    source: str  # a URL, "claims.yaml", the environment variable, or CPU_SOURCE
    as_of: str  # ISO date the price was read; "" for an environment override

    @property
    def usd_per_hour(self) -> float:
        return self.usd_per_chip_hour * self.num_chips

    @property
    def priced(self) -> bool:
        return not math.isnan(self.usd_per_chip_hour)

    def cost_usd(self, device_s: float) -> float:
        """Dollars for ``device_s`` seconds of the machine."""
        return device_s * self.usd_per_hour / 3600.0


def list_price(chip: str) -> DeclaredPrice | None:
    """The on-demand list price of ``chip`` (a spec-table key), or None when unlisted."""
    per_chip = get_chip(chip).price_per_chip_hour
    if chip not in _LIST_PRICED_CHIPS or per_chip is None:
        return None
    return DeclaredPrice(
        usd_per_chip_hour=per_chip, source=TPU_PRICING_URL, as_of=_LIST_PRICES_AS_OF
    )


def unpriced(hardware: dict[str, Any]) -> MachinePrice:
    """The price of a machine nobody priced: NaN dollars, so sums say so instead of $0."""
    return MachinePrice(math.nan, int(hardware.get("num_chips") or 1), UNPRICED_SOURCE, "")


def machine_price(hardware: dict[str, Any], declared: dict[str, DeclaredPrice]) -> MachinePrice:
    """The price of the machine ``hardware`` (detection.detect_hardware()) describes.

    Raises UnpricedError naming the chip and how to price it, for an accelerator without a price.
    """
    num_chips = int(hardware.get("num_chips") or 1)
    if hardware["platform"] == "cpu":
        return MachinePrice(0.0, num_chips, CPU_SOURCE, "")
    override = os.environ.get(PRICE_ENV_VAR)
    if override:
        try:
            per_hour = float(override)
        except ValueError:
            raise UnpricedError(f"{PRICE_ENV_VAR}={override!r} is not a number") from None
        if per_hour < 0:
            raise UnpricedError(f"{PRICE_ENV_VAR}={override!r} must be >= 0")
        return MachinePrice(per_hour / num_chips, num_chips, f"environment {PRICE_ENV_VAR}", "")
    chip = hardware.get("chip")
    price = declared.get(chip) if chip else None
    source_note = "claims.yaml budget.prices: "
    if price is None and chip:
        price, source_note = list_price(chip), ""
    if price is None:
        name = chip or hardware.get("device_kind") or hardware["platform"]
        raise UnpricedError(
            f"no price for {name}: declare one in claims.yaml budget.prices.{name} "
            f"or set {PRICE_ENV_VAR} (USD per hour for the whole machine)"
        )
    return MachinePrice(
        price.usd_per_chip_hour, num_chips, source_note + price.source, price.as_of.isoformat()
    )
