"""The scoreboard's ledger: spend against the budget over time, $/Mtok per claim and hardware."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure

from claimbench.lab.figures.svg import figure_to_svg
from claimbench.ledger.budget import fmt_usd, per_mtok_table

# As the other scoreboard charts: text stays text, at the page's size.
_RC = {"svg.fonttype": "none", "font.size": 9}


@rc_context(_RC)
def spend_svg(ledger: pd.DataFrame, budget_usd: float) -> str:
    """Cumulative dollars (y) by run start (x) as a step line, the budget as a horizontal line."""
    fig = Figure(figsize=(6.0, 2.6))
    ax = fig.add_subplot()
    ax.axhline(budget_usd, color="#b2182b", linestyle="--", linewidth=1, label="budget")
    rows = ledger.assign(when=pd.to_datetime(ledger["start"], utc=True, format="ISO8601"))
    rows = rows.sort_values("when")
    spent = float(rows["usd"].sum())
    if len(rows):
        times = list(rows["when"])
        cumulative = list(rows["usd"].fillna(0.0).cumsum())  # unpriced runs add nothing
        ax.step(times, cumulative, where="post", color="#2166ac", linewidth=1.5, label="spent")
        ax.scatter(times, cumulative, s=8, color="#2166ac", zorder=3)
        fig.autofmt_xdate()
    else:
        ax.text(
            0.5,
            0.5,
            "no runs in the ledger yet",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="#666",
        )
        ax.set_xticks([])
    ax.set_ylim(0, max(budget_usd, spent) * 1.08)
    ax.set_ylabel("USD spent (cumulative)")
    # Escaped: a bare $ starts matplotlib's math text.
    title = f"{fmt_usd(spent)} of {fmt_usd(budget_usd)}".replace("$", r"\$")
    ax.set_title(title, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.grid(alpha=0.3)
    return figure_to_svg(fig)


def _cell(value: float, fmt: str) -> str:
    return "-" if math.isnan(value) else fmt.format(value)


def mtok_rows(ledger: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per claim and hardware, formatted for the page."""
    return [
        {
            "claim_id": r.claim_id,
            "hardware": r.chip if r.chip == r.hardware_class else f"{r.hardware_class} {r.chip}",
            "num_runs": int(r.num_runs),
            "device_s": f"{r.device_s:,.0f}",
            "usd": fmt_usd(r.usd),
            "output_tokens": f"{int(r.output_tokens):,}",
            "tokens_per_s": _cell(r.tokens_per_s, "{:,.0f}"),
            "usd_per_mtok": fmt_usd(r.usd_per_mtok),
        }
        for r in per_mtok_table(ledger).itertuples()
    ]
