"""LabelledHistogram against prometheus_client's own Histogram: the same samples."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from claimbench.serving.monitoring.labelled_histogram import LabelledHistogram
from claimbench.serving.monitoring.metrics import ITL_BUCKETS


def exposition_lines(registry: CollectorRegistry) -> list[str]:
    """The exposition without comments and _created series (the reference has them)."""
    text = generate_latest(registry).decode()
    return [
        line for line in text.splitlines() if not line.startswith("#") and "_created" not in line
    ]


def test_same_exposition_as_prometheus_histogram_for_the_same_observations():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = LabelledHistogram("x:latency_seconds", "Latency.", "tenant", ITL_BUCKETS, ours)
    reference = Histogram(
        "x:latency_seconds", "Latency.", ["tenant"], buckets=ITL_BUCKETS, registry=theirs
    )
    rng = random.Random(0)
    # Values on the bounds too: a bucket counts values less than or equal to its bound.
    values = [rng.expovariate(8.0) for _ in range(500)] + list(ITL_BUCKETS) + [0.0, 1e6]
    for value in values:
        tenant = rng.choice(["alice", "bob"])
        fast.labels(tenant).observe(value)
        reference.labels(tenant).observe(value)
    mine = exposition_lines(ours)
    assert mine == exposition_lines(theirs)
    assert 'x:latency_seconds_bucket{le="0.01",tenant="alice"}' in "\n".join(mine)


def test_counts_are_cumulative_and_end_in_the_total():
    registry = CollectorRegistry()
    hist = LabelledHistogram("y_seconds", "Y.", "tenant", (1.0, 2.0), registry)
    for value in (0.5, 1.0, 1.5, 3.0, 3.0):
        hist.labels("a").observe(value)
    assert registry.get_sample_value("y_seconds_bucket", {"tenant": "a", "le": "1.0"}) == 2
    assert registry.get_sample_value("y_seconds_bucket", {"tenant": "a", "le": "2.0"}) == 3
    assert registry.get_sample_value("y_seconds_bucket", {"tenant": "a", "le": "+Inf"}) == 5
    assert registry.get_sample_value("y_seconds_count", {"tenant": "a"}) == 5
    assert registry.get_sample_value("y_seconds_sum", {"tenant": "a"}) == 9.0


def test_unsorted_buckets_are_refused():
    with pytest.raises(ValueError, match="increasing"):
        LabelledHistogram("z_seconds", "Z.", "tenant", (2.0, 1.0), CollectorRegistry())
