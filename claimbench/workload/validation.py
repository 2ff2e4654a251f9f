"""Field checks shared by the workload configs.

Each check returns the value normalised to a plain Python type, so a config
built from numpy scalars or JSON still serialises to plain JSON and compares
equal after a round trip.
"""

from __future__ import annotations

import math
import numbers


def check_int(owner: str, name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` as an ``int``; ValueError naming ``owner.name`` unless an integer >= minimum."""
    # bool is an Integral, but True as a count or length is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{owner}.{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_positive(owner: str, name: str, value: object) -> float:
    """``value`` as a ``float``; ValueError naming ``owner.name`` unless it is finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{owner}.{name} must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{owner}.{name} must be finite and > 0, got {value!r}")
    return float(value)


def check_name(owner: str, name: str, value: object) -> str:
    """``value`` unchanged; ValueError naming ``owner.name`` unless it is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{owner}.{name} must be a non-empty string, got {value!r}")
    return value


def check_keys(owner: str, data: object, allowed: set[str], required: set[str]) -> dict:
    """``data`` as a dict; ValueError naming ``owner`` on a non-dict, unknown or missing key."""
    if not isinstance(data, dict):
        raise ValueError(f"{owner} must be a dict, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{owner}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(data))
    if missing:
        raise ValueError(f"{owner}: missing key(s) {missing}")
    return data
