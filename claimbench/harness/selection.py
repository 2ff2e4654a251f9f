"""Which stored runs count: ``--since DATE`` (by when a run ended) and ``--origin NAME``."""

from __future__ import annotations

from datetime import UTC, datetime

from claimbench.harness.results import StoredRun
from claimbench.harness.run_info import parse_time


def parse_since(text: str) -> datetime:
    """``2026-11-29`` (midnight UTC) or an ISO time; ValueError naming the bad text."""
    when = parse_time(text.strip())
    if when is None:
        raise ValueError(f"--since {text!r} is not a date: use YYYY-MM-DD or an ISO time")
    return when.astimezone(UTC)


def select_runs(
    runs: list[StoredRun], *, since: datetime | None = None, origin: str | None = None
) -> list[StoredRun]:
    """The runs that ended at or after ``since`` and came from ``origin`` (None: any).

    A run whose end time or origin is unknown (stored before origins were recorded) cannot be
    shown to match, so a filter on that field leaves it out.
    """
    chosen = []
    for run in runs:
        if since is not None:
            end = parse_time(str(run.meta.get("end") or ""))
            if end is None or end < since:
                continue
        if origin is not None and run.meta.get("origin") != origin:
            continue
        chosen.append(run)
    return chosen
