"""Scoreboard charts: matplotlib figures returned as inline SVG text."""

from __future__ import annotations

import io
import re

from matplotlib import rc_context
from matplotlib.figure import Figure

from claimbench.harness.claims import Condition
from claimbench.harness.scoring import Calibration, ConditionScore

# Text stays text (the page's font renders it) rather than glyph paths: smaller, selectable.
_RC = {"svg.fonttype": "none", "font.size": 9}
_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
CLASS_COLOURS = {"tpu": "#1b7837", "gpu": "#2166ac", "cpu": "#b35806", "analytic": "#762a83"}


def figure_to_svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element to inline in HTML.

    Drops the XML prologue and DOCTYPE (invalid inside HTML, and the DOCTYPE names a DTD URL) and
    the RDF metadata block, so the page references nothing outside itself.
    """
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    return _METADATA.sub("", _PROLOGUE.sub("", buffer.getvalue(), count=1))


@rc_context(_RC)
def calibration_svg(cal: Calibration) -> str:
    """Reliability diagram: stated confidence (x) vs observed confirmation rate (y) per bin."""
    fig = Figure(figsize=(4.2, 3.6))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], linestyle="--", color="#999999", linewidth=1, label="perfect")
    if cal.bins:
        xs = [b.mean_confidence for b in cal.bins]
        ys = [b.observed_rate for b in cal.bins]
        sizes = [40 + 40 * b.count for b in cal.bins]
        ax.scatter(xs, ys, s=sizes, color="#2166ac", alpha=0.8, zorder=3, label="claims (bins)")
        for b, x, y in zip(cal.bins, xs, ys, strict=True):
            # Labels left of points near the right edge so they stay inside the axes.
            offset, align = ((-10, -3), "right") if x > 0.8 else ((10, -3), "left")
            ax.annotate(f"n={b.count}", (x, y), textcoords="offset points", xytext=offset, ha=align)
    else:
        ax.text(0.5, 0.5, "no decided claims yet", ha="center", va="center", color="#666666")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("stated confidence")
    ax.set_ylabel("observed rate confirmed")
    ax.legend(loc="upper left", frameon=False, markerscale=0.6)
    ax.grid(alpha=0.3)
    return figure_to_svg(fig)


@rc_context(_RC)
def condition_svg(condition: Condition, rows: list[tuple[str, ConditionScore]]) -> str:
    """One condition across evidence groups: trial values (dots), estimate and 95% CI (bar),
    the predicted threshold (line) with the predicted side shaded.

    ``rows`` holds (label, score) pairs, one per evidence group; groups without values are shown
    as "missing".
    """
    fig = Figure(figsize=(6.0, 0.7 + 0.45 * max(len(rows), 1)))
    ax = fig.add_subplot()
    values = [condition.value]
    for y, (_, cs) in enumerate(rows):
        colour = CLASS_COLOURS.get(cs.evidence or "", "#444444")
        if cs.estimate is None:
            ax.text(condition.value, y, " missing", va="center", color="#666666")
            continue
        ax.scatter(cs.trial_values, [y] * cs.num_trials, s=14, color=colour, alpha=0.5)
        ax.errorbar(
            cs.estimate,
            y,
            # Clamped: with identical trials the bootstrap CI and the mean differ by rounding.
            xerr=[[max(cs.estimate - cs.ci_lo, 0.0)], [max(cs.ci_hi - cs.estimate, 0.0)]],
            fmt="D",
            color=colour,
            capsize=4,
            markersize=5,
        )
        values += [*cs.trial_values, cs.ci_lo, cs.ci_hi]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.15 or abs(hi) * 0.15 or 1.0
    ax.set_xlim(lo - pad, hi + pad)
    ax.axvline(condition.value, color="#333333", linewidth=1)
    predicted = (
        (condition.value, hi + pad) if condition.op in (">=", ">") else (lo - pad, condition.value)
    )
    ax.axvspan(*predicted, color="#1b7837", alpha=0.08, label="predicted side")
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.set_ylim(-0.6, max(len(rows), 1) - 0.4)
    ax.set_xlabel(str(condition))
    ax.grid(axis="x", alpha=0.3)
    return figure_to_svg(fig)
