"""The engine's own numbers over nights: the peer comparisons (bench/peers.py) as series.

One series per peer and hardware class (``TPU v6e x1``, ``CPU (AMD EPYC family 25 model 1,
avx2, 2 cores)``: peers.record_hardware), oldest first, of the measured records: our output
tok/s, the ratio ours / peer, and our TTFT and TPOT p50 and p99. The change rule is the
claims' (harness/history.py): a move is flagged when the new 95% interval lies wholly past the
previous record's, a move within them is noise. For tok/s and the ratio higher is better
(wholly below: a regression), for the latencies lower is (wholly above: a regression). The
intervals come from each record's rounds (harness.intervals: Student-t over our tok/s and over
each round's own latency percentile, log-t over the per-round ratios ours / peer). Records from
before the benchmark kept each round's percentiles (``ttft_ms_rounds``/``tpot_ms_rounds``) have
one pooled number a night: shown, never flagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from claimbench.bench import peers
from claimbench.harness import intervals

REGRESSION = "regression beyond noise"
IMPROVEMENT = "improvement beyond noise"
# (name, unit, higher is better) of the numbers that carry an interval and are flagged.
FLAGGED = (
    ("ours tok/s", "tok/s", True),
    ("ours / peer", "x", True),
    ("ours TTFT p50", "ms", False),
    ("ours TTFT p99", "ms", False),
    ("ours TPOT p50", "ms", False),
    ("ours TPOT p99", "ms", False),
)
# The latency names above: (record key, percentile).
LATENCIES = {
    "ours TTFT p50": ("ttft_ms", "p50"),
    "ours TTFT p99": ("ttft_ms", "p99"),
    "ours TPOT p50": ("tpot_ms", "p50"),
    "ours TPOT p99": ("tpot_ms", "p99"),
}


@dataclass(frozen=True)
class EnginePoint:
    """One measured peer record's numbers."""

    time: str
    commit: str | None
    values: dict[str, intervals.Interval]  # FLAGGED name -> estimate and interval, if measured
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None

    @property
    def date(self) -> str:
        return datetime.fromisoformat(self.time).astimezone(UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class EngineSeries:
    """One peer's comparisons on one hardware, oldest first."""

    peer: str
    hardware: str
    points: tuple[EnginePoint, ...]


@dataclass(frozen=True)
class EngineChange:
    """A flagged move of one number between consecutive records of a series."""

    hardware: str
    metric: str
    kind: str  # REGRESSION | IMPROVEMENT
    date: str
    before_commit: str | None
    after_commit: str | None
    before: intervals.Interval
    after: intervals.Interval

    def describe(self) -> str:
        """One line: ``engine TPU v6e x1: ours tok/s regression beyond noise: 812 [..] -> ..``."""

        def text(iv: intervals.Interval) -> str:
            return f"{iv.estimate:.4g} [{iv.lo:.4g}, {iv.hi:.4g}]"

        commits = f"{(self.before_commit or '?')[:10]} -> {(self.after_commit or '?')[:10]}"
        return (
            f"engine {self.hardware}: {self.metric} {self.kind}: {text(self.before)} -> "
            f"{text(self.after)} ({commits})"
        )


def _rounds(side: dict[str, Any]) -> np.ndarray:
    """A side's per-round tok/s (records without rounds: their one mean)."""
    rounds = side.get("tok_s") or [side.get("median_tok_s", side["mean_tok_s"])]
    return np.asarray([float(x) for x in rounds], dtype=np.float64)


def _percentile(side: dict[str, Any], name: str, q: str) -> float | None:
    value = (side.get(name) or {}).get(q)
    return float(value) if value is not None else None


def _latency(side: dict[str, Any], name: str, q: str) -> intervals.Interval | None:
    """A latency percentile's interval over each round's own (``<name>_rounds``); a record
    without them: its pooled number, with no interval; None where the side has neither."""
    rounds = (side.get(f"{name}_rounds") or {}).get(q)
    if rounds:
        return intervals.estimate_interval(np.asarray(rounds, dtype=np.float64), "ms")
    pooled = _percentile(side, name, q)
    return None if pooled is None else intervals.Interval(pooled, None, None, "single")


def engine_point(record: dict[str, Any]) -> EnginePoint:
    """The numbers of one measured record (peers.read_peers)."""
    result = record["result"]
    ours, theirs = _rounds(result["ours"]), _rounds(result["vllm"])
    values = {"ours tok/s": intervals.estimate_interval(ours, "tok/s")}
    if ours.size == theirs.size and ours.size > 1 and np.all(theirs > 0):
        values["ours / peer"] = intervals.estimate_interval(ours / theirs, "x")
    else:
        values["ours / peer"] = intervals.Interval(float(result["ratio"]), None, None, "single")
    side = result["ours"]
    for metric, (name, q) in LATENCIES.items():
        latency = _latency(side, name, q)
        if latency is not None:
            values[metric] = latency
    return EnginePoint(
        time=record["time"],
        commit=(record.get("git") or {}).get("sha"),
        values=values,
        ttft_p50_ms=_percentile(side, "ttft_ms", "p50"),
        ttft_p99_ms=_percentile(side, "ttft_ms", "p99"),
        tpot_p50_ms=_percentile(side, "tpot_ms", "p50"),
        tpot_p99_ms=_percentile(side, "tpot_ms", "p99"),
    )


def engine_series(records: list[dict[str, Any]]) -> list[EngineSeries]:
    """The measured records (peers.read_peers, oldest first) as one series per peer and
    hardware, in the order each first appears."""
    grouped: dict[tuple[str, str], list[EnginePoint]] = {}
    for record in records:
        if record["status"] == peers.MEASURED:
            key = (record["peer"], peers.record_hardware(record))
            grouped.setdefault(key, []).append(engine_point(record))
    return [EngineSeries(peer, hw, tuple(points)) for (peer, hw), points in grouped.items()]


def _moved(
    before: intervals.Interval, after: intervals.Interval, higher_is_better: bool
) -> str | None:
    if None in (before.lo, before.hi, after.lo, after.hi):
        return None
    if after.hi < before.lo:
        return REGRESSION if higher_is_better else IMPROVEMENT
    if after.lo > before.hi:
        return IMPROVEMENT if higher_is_better else REGRESSION
    return None


def engine_changes(series: list[EngineSeries], since: str | None = None) -> list[EngineChange]:
    """Flagged moves between consecutive records whose later record is dated ``since``
    (``YYYY-MM-DD``) or after; None: the newest record's date, "last night"."""
    if since is None:
        dates = [p.date for s in series for p in s.points]
        if not dates:
            return []
        since = max(dates)
    return [
        change
        for s in series
        for p, q in zip(s.points, s.points[1:], strict=False)
        if q.date >= since
        for change in point_changes(s.hardware, p, q)
    ]


def point_changes(hardware: str, before: EnginePoint, after: EnginePoint) -> list[EngineChange]:
    """The flagged moves from record ``before`` to the next record ``after`` of one series."""
    found = []
    for metric, _, higher_is_better in FLAGGED:
        if metric not in before.values or metric not in after.values:
            continue
        kind = _moved(before.values[metric], after.values[metric], higher_is_better)
        if kind:
            found.append(
                EngineChange(
                    hardware,
                    metric,
                    kind,
                    after.date,
                    before.commit,
                    after.commit,
                    before.values[metric],
                    after.values[metric],
                )
            )
    return found
