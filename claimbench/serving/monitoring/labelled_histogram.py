"""A Prometheus histogram per label value that one thread observes without locks.

The engine observes a latency for every token it emits, on its own loop, between steps:
``prometheus_client.Histogram`` takes a lock for the sum and another for the bucket on each
observation (about 2 µs); here an observation is a bisect and two additions. It is exposed
as the same histogram family (``_bucket`` with cumulative counts and ``le``, ``_count``,
``_sum``), read at scrape time.

One thread observes; a scrape from another thread (the in-process server renders on its
event loop) copies the counts first, and may see a scrape's worth of observations
unevenly counted in a series's buckets and sum, never a count going down.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class HistogramSeries:
    """One label value's buckets (not cumulative; the last is +Inf) and sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": the first bound >= value.
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value


class LabelledHistogram:
    """A histogram family with one label, registered as a collector of ``registry``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"{name}: buckets must be increasing, got {buckets}")
        self.name, self.documentation, self.label = name, documentation, label
        self._bounds = bounds
        self._les = [floatToGoString(b) for b in bounds] + ["+Inf"]
        self._series: dict[str, HistogramSeries] = {}
        registry.register(self)

    @property
    def series(self) -> dict[str, HistogramSeries]:
        """Each label value's series."""
        return self._series

    def labels(self, value: str) -> HistogramSeries:
        series = self._series.get(value)
        if series is None:
            series = self._series[value] = HistogramSeries(self._bounds)
        return series

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, series in list(self._series.items()):
            counts, total = list(series.counts), series.sum
            cumulative, buckets = 0, []
            for le, n in zip(self._les, counts, strict=True):
                cumulative += n
                buckets.append((le, float(cumulative)))
            family.add_metric([value], buckets, total)
        yield family

    def describe(self) -> list[HistogramMetricFamily]:
        # Without it, registering would call collect() to learn the names.
        return [HistogramMetricFamily(self.name, self.documentation, labels=[self.label])]
