"""What a replacement engine process's metrics start from: its predecessor's totals.

The metrics are observed in the engine process (metrics.py), so when it died every
per-tenant series vanished from /metrics and came back from zero with the new one: a
scraper saw counters reset and tenants disappear. The engine process now sends its totals
(every counter and per-tenant histogram series) to the server every TOTALS_S and with each
scrape (engine_core.py), and a restarted one starts from the last totals the server got
(supervisor.py): every series a scraper saw stays, and never goes down. What the dead
process counted after its last send (under TOTALS_S of traffic) is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import Counter

if TYPE_CHECKING:  # metrics.py imports this module
    from claimbench.serving.monitoring.metrics import ServerMetrics

TOTALS_S = 1.0  # how often the engine process sends its totals while it serves


@dataclass(frozen=True)
class MetricTotals:
    """Plain values of a ServerMetrics (they pickle across the pipe)."""

    # (attribute of ServerMetrics, label values, value) for every counter series
    counters: tuple[tuple[str, tuple[str, ...], float], ...]
    # (attribute, tenant, per-bucket counts, sum) for every per-tenant histogram series
    histograms: tuple[tuple[str, str, tuple[int, ...], float], ...]
    tenants: tuple[str, ...]  # every tenant the metrics have seen (their gauges read 0)


COUNTERS = ("prompt_tokens", "generation_tokens", "success", "rejected")
HISTOGRAMS = ("ttft", "itl", "e2e")


def totals_of(metrics: ServerMetrics) -> MetricTotals:
    """``metrics``' (a ServerMetrics) totals now."""
    counters = []
    for name in COUNTERS:
        counter: Counter = getattr(metrics, name)
        for family in counter.collect():
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counters.append((name, tuple(sample.labels.values()), sample.value))
    histograms = []
    for name in HISTOGRAMS:
        for tenant, series in list(getattr(metrics, name).series.items()):
            histograms.append((name, tenant, tuple(series.counts), series.sum))
    return MetricTotals(tuple(counters), tuple(histograms), tuple(sorted(metrics.tenants_seen)))


def carry_into(metrics: ServerMetrics, totals: MetricTotals) -> None:
    """Start ``metrics`` (a new ServerMetrics) from ``totals``."""
    for name, labels, value in totals.counters:
        getattr(metrics, name).labels(*labels).inc(value)
    for name, tenant, counts, total in totals.histograms:
        series = getattr(metrics, name).labels(tenant)
        series.counts = list(counts)
        series.sum = total
    metrics.tenants_seen.update(totals.tenants)
