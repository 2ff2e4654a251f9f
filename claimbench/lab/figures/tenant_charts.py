"""Charts for the multi-tenant claims: per-tenant TTFT CDFs and cumulative service over time.

Each reads the newest run directory whose saved frames hold what it plots, and draws one
panel per ``mode`` label the experiment saved its frames under (e.g. fcfs beside vtc).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure

from claimbench.lab.figures.svg import figure_to_svg
from claimbench.lab.load.tenant_runs import observed_ttft_s
from claimbench.lab.metrics.service import cumulative_service, frame_tenants

MAX_PANELS = 4
_RC = {"svg.fonttype": "none", "font.size": 9}  # as charts.py: text stays text


def newest_frame(
    run_dirs: list[Path], name: str, needed: tuple[str, ...]
) -> tuple[Path, pd.DataFrame] | None:
    """(run dir, its ``name`` frame) for the newest run (``run_dirs`` is oldest first) whose
    frame has rows and every ``needed`` column; None when no run has one."""
    for run_dir in reversed(run_dirs):
        path = Path(run_dir) / f"{name}.parquet"
        if not path.is_file():
            continue
        frame = pd.read_parquet(path)
        if len(frame) and all(c in frame.columns for c in needed):
            return Path(run_dir), frame
    return None


def _panels(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    if "mode" not in frame.columns:
        return [("", frame)]
    return [(str(m), g) for m, g in frame.groupby("mode", sort=False)][:MAX_PANELS]


@rc_context(_RC)
def ttft_cdf_svg(requests: pd.DataFrame) -> str:
    """Empirical CDF of TTFT per tenant (censored at the run's end for requests still
    waiting; rejected ones left out), one panel per mode."""
    panels = _panels(requests)
    fig = Figure(figsize=(3.6 * len(panels), 3.0))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (mode, group) in zip(axes, panels, strict=True):
        ttft = observed_ttft_s(group)
        for tenant, rows in group.groupby("tenant", sort=True):
            values = np.sort(ttft.loc[rows.index].dropna().to_numpy(float))
            if len(values):
                fraction = np.arange(1, len(values) + 1) / len(values)
                ax.step(values, fraction, where="post", label=tenant)
        pooled = ttft.dropna().to_numpy(float)
        if len(pooled):
            ax.axvline(
                np.percentile(pooled, 99), color="#333333", ls="--", lw=1, label="pooled p99"
            )
        ax.set_title(mode)
        ax.set_xlabel("TTFT (s)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    axes[-1].legend(loc="lower right", frameon=False, fontsize=7)
    return figure_to_svg(fig)


# One style per tenant, told apart by dash and marker as well as colour: under VTC the
# tenants' lines lie on top of each other, and a solid line would hide the one below.
_TENANT_STYLES = (
    {"ls": "-", "marker": "o"},
    {"ls": "--", "marker": "s"},
    {"ls": ":", "marker": "^"},
    {"ls": "-.", "marker": "D"},
)


@rc_context(_RC)
def service_svg(steps: pd.DataFrame, *, input_weight: float, output_weight: float) -> str:
    """Cumulative service (w_in * input + w_out * output tokens) per tenant against time,
    one panel per mode (the first trial saved under each), one legend for all panels."""
    panels = _panels(steps)
    fig = Figure(figsize=(3.8 * len(panels), 3.3))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    tenants = sorted({t for _, g in panels for t in frame_tenants(g.dropna(axis=1, how="all"))})
    handles = {}
    for ax, (mode, group) in zip(axes, panels, strict=True):
        if "trial" in group.columns:
            group = group[group["trial"] == group["trial"].min()]
        group = group.dropna(axis=1, how="all")
        service = cumulative_service(group, input_weight=input_weight, output_weight=output_weight)
        for tenant in frame_tenants(group):
            style = _TENANT_STYLES[tenants.index(tenant) % len(_TENANT_STYLES)]
            (line,) = ax.plot(
                group["start_s"],
                service[tenant] / 1000.0,
                color=f"C{tenants.index(tenant)}",
                lw=1.4,
                markevery=max(len(group) // 8, 1),
                markersize=4,
                markerfacecolor="none",
                label=tenant,
                **style,
            )
            handles.setdefault(tenant, line)
        ax.set_title(mode)
        ax.set_xlabel("time since run start (s)")
        ax.grid(alpha=0.3)
    weights = f"{input_weight:g} x input + {output_weight:g} x output"
    axes[0].set_ylabel(f"cumulative service\n(thousand weighted tokens:\n{weights})")
    fig.legend(
        list(handles.values()),
        [f"tenant {t}" for t in handles],
        loc="upper center",
        ncol=len(handles),
        frameon=False,
        fontsize=8,
    )
    fig.subplots_adjust(top=0.8, bottom=0.17, left=0.17 / len(panels) + 0.05)
    return figure_to_svg(fig)


def ttft_cdf_figures(run_dirs: list[Path], *, title: str) -> list[tuple[str, str]]:
    """[(title, svg)] for the newest run's requests, or [] when none has TTFTs."""
    needed = ("tenant", "arrival_s", "first_token_s", "finish_s", "finish_reason")
    found = newest_frame(run_dirs, "requests", needed)
    return [] if found is None else [(title, ttft_cdf_svg(found[1]))]
