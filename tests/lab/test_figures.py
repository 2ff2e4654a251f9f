"""lab/figures: what experiments' figures draw with sits below the site and outside every
design hash (a chart changed re-draws a page, it does not void a run)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from claimbench.harness.design import design_of
from claimbench.lab.figures.svg import figure_to_svg

REPO = Path(__file__).resolve().parents[2]


def test_an_experiment_drawing_tenant_charts_does_not_hash_them():
    modules = set(design_of(REPO / "experiments" / "fairness_vtc.py").modules)
    assert "claimbench.lab.metrics.service" in modules  # what its run measures with stays in
    assert not any(m.startswith(("claimbench.lab.figures", "claimbench.site")) for m in modules)


def test_a_figure_becomes_one_inline_svg_element_and_the_same_text_twice():
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    svg = figure_to_svg(fig)
    assert svg.startswith("<svg") and "<metadata>" not in svg and "<!DOCTYPE" not in svg
    assert svg == figure_to_svg(fig)
