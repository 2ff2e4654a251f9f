"""The ``counterfactual`` param: one mechanism of an experiment switched off, by name.

An experiment that can run with its mechanism switched off (or replaced by the opposite
policy) takes ``counterfactual`` from its params: ``"none"`` (the default, the experiment as
registered) or one of the names it declares. The counterfactual is the real experiment with
that one thing changed, so a test can show each measured condition is able to land on the
other side of its threshold.
"""

from __future__ import annotations

from typing import Any

NONE = "none"


def chosen(params: dict[str, Any], allowed: tuple[str, ...]) -> str:
    """The params' ``counterfactual`` (``"none"`` when absent); ValueError naming the value
    and the allowed ones when it is not ``"none"`` or one of ``allowed``."""
    value = params.get("counterfactual", NONE)
    if value != NONE and value not in allowed:
        raise ValueError(
            f"counterfactual {value!r} is not one of {(NONE, *allowed)} for this experiment"
        )
    return value
