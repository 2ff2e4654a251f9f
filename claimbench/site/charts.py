"""Scoreboard charts: matplotlib figures returned as inline SVG text."""

from __future__ import annotations

import math

from matplotlib import rc_context
from matplotlib.figure import Figure

from claimbench.harness.calibration import Calibration
from claimbench.harness.claims import Condition
from claimbench.harness.scoring import ConditionScore
from claimbench.lab.figures.svg import figure_to_svg

# Text stays text (the page's font renders it) rather than glyph paths: smaller, selectable.
_RC = {"svg.fonttype": "none", "font.size": 9}
CLASS_COLOURS = {"tpu": "#1b7837", "gpu": "#2166ac", "cpu": "#b35806", "analytic": "#762a83"}
# The x axis spans at least this fraction of the largest magnitude shown, so a miss of 0.5% of
# the threshold takes a few percent of the axis instead of all of it.
MIN_SPAN_FRACTION = 0.1
PAD_FRACTION = 0.08


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
        ax.text(0.5, 0.5, "no claims decided in scope yet", ha="center", va="center", color="#666")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("stated confidence (probability)")
    ax.set_ylabel("observed rate confirmed (fraction)")
    ax.legend(loc="upper left", frameon=False, markerscale=0.6)
    ax.grid(alpha=0.3)
    return figure_to_svg(fig)


def axis_limits(values: list[float]) -> tuple[float, float, bool]:
    """(lo, hi, zoomed) of an x axis showing ``values`` (threshold included by the caller).

    The span is at least MIN_SPAN_FRACTION of the largest magnitude, then padded; an axis over
    non-negative values stops at 0 rather than pad into negatives. ``zoomed``: zero is not on
    the axis, so distances along it are not proportions of the values.
    """
    if not values:
        raise ValueError("axis_limits needs at least one value")
    lo, hi = min(values), max(values)
    min_span = MIN_SPAN_FRACTION * max(abs(lo), abs(hi))
    if hi - lo < min_span:
        centre = (lo + hi) / 2
        lo, hi = centre - min_span / 2, centre + min_span / 2
    pad = (hi - lo) * PAD_FRACTION or 1.0
    left, right = lo - pad, hi + pad
    # Non-negative values whose axis would start within a pad of zero show zero itself: an
    # axis "zoomed" to start at 0.0008 says nothing a reader can use.
    if min(values) >= 0 and left < (right - left) * PAD_FRACTION * 2:
        left = 0.0
    return left, right, left > 0 or right < 0


@rc_context(_RC)
def condition_svg(condition: Condition, rows: list[tuple[str, ConditionScore]]) -> str:
    """One condition across evidence groups: trial values (dots), estimate and 95% CI (bar),
    the predicted threshold (line) with the predicted side shaded.

    ``rows`` holds (label, score) pairs, one per evidence group; groups without values are shown
    as "missing". The x axis always includes the threshold, is labelled with the metric's unit,
    and says when it is zoomed (zero not shown).
    """
    fig = Figure(figsize=(6.0, 0.9 + 0.45 * max(len(rows), 1)))
    ax = fig.add_subplot()
    values = [condition.value]
    for _, cs in rows:
        if cs.estimate is not None:
            values += [*cs.trial_values, cs.estimate]
            values += [v for v in (cs.ci_lo, cs.ci_hi) if v is not None]
    # An infinite or NaN value (a ratio over a zero) has no place on the axis: the axis spans
    # the finite ones, and a row holding any says how many it left out.
    left, right, zoomed = axis_limits([v for v in values if math.isfinite(v)])
    for y, (_, cs) in enumerate(rows):
        colour = CLASS_COLOURS.get(cs.evidence or "", "#444444")
        if cs.estimate is None:
            ax.text(condition.value, y, " missing", va="center", color="#666666")
            continue
        shown = [v for v in cs.trial_values if math.isfinite(v)]
        ax.scatter(shown, [y] * len(shown), s=14, color=colour, alpha=0.5)
        left_out = len(cs.trial_values) - len(shown)
        if left_out or not math.isfinite(cs.estimate):
            what = f" {left_out} trial value(s)" if left_out else " the estimate"
            ax.text(left, y + 0.3, what + " not finite: off the axis", color="#666666")
            if not math.isfinite(cs.estimate):
                continue
        finite_ci = all(v is not None and math.isfinite(v) for v in (cs.ci_lo, cs.ci_hi))
        if finite_ci and cs.method != "exact":
            xerr = [[max(cs.estimate - cs.ci_lo, 0.0)], [max(cs.ci_hi - cs.estimate, 0.0)]]
            ax.errorbar(cs.estimate, y, xerr=xerr, fmt="D", color=colour, capsize=4, markersize=5)
        else:
            ax.plot(cs.estimate, y, "D", color=colour, markersize=5)
            note = {
                "exact": " exact",
                "constant": " constant: no interval",
                "never": " never: 0 in every trial is required",
            }.get(cs.method or "")
            if note:
                # Left of points in the right half, so the note stays inside the axes.
                right_half = cs.estimate > (left + right) / 2
                offset, align = ((-6, 4), "right") if right_half else ((6, 4), "left")
                ax.annotate(
                    note, (cs.estimate, y), xytext=offset, textcoords="offset points", ha=align
                )
    ax.set_xlim(left, right)
    ax.axvline(condition.value, color="#333333", linewidth=1)
    predicted = (condition.value, right) if condition.op in (">=", ">") else (left, condition.value)
    ax.axvspan(*predicted, color="#1b7837", alpha=0.08)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.set_ylim(-0.6, max(len(rows), 1) - 0.4)
    unit = next((cs.unit for _, cs in rows if cs.unit), "")
    label = f"{condition.metric} ({unit})" if unit else condition.metric
    label += f" · predicted {condition.op} {condition.value:g} (shaded)"
    if zoomed:
        label += f"\naxis zoomed to {left:.3g} – {right:.3g}: zero not shown"
    ax.set_xlabel(label)
    ax.grid(axis="x", alpha=0.3)
    return figure_to_svg(fig)
