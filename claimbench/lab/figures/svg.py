"""A matplotlib figure as an inline ``<svg>`` element: what every chart on the site returns."""

from __future__ import annotations

import io
import re

from matplotlib import rc_context
from matplotlib.figure import Figure

_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_ID = re.compile(r'\s+id="([^"]*)"')
_REFERENCE = re.compile(r'#([^"()\s]+)')


def figure_to_svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element to inline in HTML.

    Drops the XML prologue and DOCTYPE (invalid inside HTML, and the DOCTYPE names a DTD URL) and
    the RDF metadata block, so the page references nothing outside itself, and every id nothing
    refers to (matplotlib names each group figure_1, axes_1, ...: two charts on one page would
    repeat them, which HTML forbids). The same figure gives the same text.
    """
    buffer = io.StringIO()
    # A fixed salt makes the ids of clip paths and markers a hash of their content alone, so
    # a rebuild from the same results writes the same SVG (a random salt changed every page
    # on every build). Two charts on one page then share an id only for identical content.
    with rc_context({"svg.hashsalt": "claimbench"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight")
    svg = _METADATA.sub("", _PROLOGUE.sub("", buffer.getvalue(), count=1))
    referenced = set(_REFERENCE.findall(svg))
    return _ID.sub(lambda m: m.group(0) if m.group(1) in referenced else "", svg)
