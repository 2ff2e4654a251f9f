"""A claim's history chart: each condition's estimate and interval over its runs, per class."""

from __future__ import annotations

from matplotlib import rc_context
from matplotlib.figure import Figure

from claimbench.harness import history
from claimbench.harness.claims import Claim
from claimbench.lab.figures.svg import figure_to_svg
from claimbench.site.charts import _RC, CLASS_COLOURS

FLIP_COLOUR = "#d6604d"


@rc_context(_RC)
def history_svg(claim: Claim, series: history.Series) -> str | None:
    """One panel per condition this class's runs measured: each run's estimate (diamond) and
    95% interval (bar) in run order (x labelled date and commit), the threshold (line) with the
    predicted side shaded, runs that may not be scored hollow, and the runs whose verdict flipped
    from the previous comparable run ringed. None when no run has an estimate of any condition.
    """
    indices = [
        i
        for i, _ in enumerate(claim.prediction)
        if any(p.run.conditions[i].estimate is not None for p in series.points)
        and any(p.run.conditions[i].status != "other-basis" for p in series.points)
    ]
    if not indices:
        return None
    flipped = {c.after_run for c in history.series_changes(claim, series) if c.kind == history.FLIP}
    colour = CLASS_COLOURS.get(series.evidence, "#444444")
    xs = list(range(len(series.points)))
    fig = Figure(figsize=(max(4.5, 0.5 * len(xs) + 2.5), 1.9 * len(indices) + 0.6))
    axes = fig.subplots(len(indices), 1, sharex=True, squeeze=False)[:, 0]
    for ax, i in zip(axes, indices, strict=True):
        condition = claim.prediction[i]
        for x, point in zip(xs, series.points, strict=True):
            cs = point.run.conditions[i]
            if cs.estimate is None:
                continue
            face = colour if point.run.current else "white"
            if cs.ci_lo is not None and cs.ci_hi is not None and cs.method != "exact":
                yerr = [[max(cs.estimate - cs.ci_lo, 0.0)], [max(cs.ci_hi - cs.estimate, 0.0)]]
                ax.errorbar(x, cs.estimate, yerr=yerr, fmt="none", ecolor=colour, capsize=3)
            ax.plot(x, cs.estimate, "D", color=colour, markerfacecolor=face, markersize=5)
            if point.run.run_id in flipped:
                ax.plot(
                    x,
                    cs.estimate,
                    "o",
                    markersize=13,
                    markerfacecolor="none",
                    markeredgecolor=FLIP_COLOUR,
                    markeredgewidth=1.5,
                )
        ax.axhline(condition.value, color="#333333", linewidth=1)
        top = condition.op in (">=", ">")
        lo, hi = ax.get_ylim()
        lo, hi = min(lo, condition.value), max(hi, condition.value)
        ax.axhspan(condition.value, hi if top else lo, color="#1b7837", alpha=0.08)
        ax.set_ylim(lo, hi)
        unit = next(
            (p.run.conditions[i].unit for p in series.points if p.run.conditions[i].unit), ""
        )
        ax.set_ylabel(f"{condition.metric}" + (f" ({unit})" if unit else ""), fontsize=8)
        ax.set_title(f"{condition} · {series.evidence}", fontsize=9, loc="left")
        ax.grid(axis="y", alpha=0.3)
    labels = [f"{p.date[5:]}\n{(p.run.info.git_sha or '?')[:7]}" for p in series.points]
    axes[-1].set_xticks(xs, labels, fontsize=7)
    axes[-1].set_xlim(-0.6, len(xs) - 0.4)
    axes[-1].set_xlabel(
        "run (date, commit) · filled: may be scored, hollow: not scored · ringed: verdict flipped"
    )
    return figure_to_svg(fig)
