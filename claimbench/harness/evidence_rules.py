"""Which evidence may decide a condition, and how many trials it needs.

Scope: a measured condition is decided only by trials on a hardware class in the claim's scope
(any -> cpu, gpu, tpu; accelerator -> gpu, tpu; tpu -> tpu). An analytic condition is decided
only by analytic evidence, which is arithmetic and so valid whatever the scope.

Trials: a timing or throughput metric varies with everything else on the machine, so it needs
MIN_TIMING_TRIALS (5 in quick, 10 in full); any other metric needs MIN_TRIALS. A metric is timing
when its unit is a time or a rate (TIMING_UNITS) or its name carries one of TIMING_WORDS, the
names the experiments give wall-clock quantities (``p99_ttft``, ``throughput_ratio``,
``fp16_speedup``, ``host_share_pct``, ...).
"""

from __future__ import annotations

MEASURED = ("tpu", "gpu", "cpu")  # the headline prefers the series' target hardware first
ANALYTIC = "analytic"
IN_SCOPE = {
    "any": frozenset({"cpu", "gpu", "tpu"}),
    "accelerator": frozenset({"gpu", "tpu"}),
    "tpu": frozenset({"tpu"}),
}
MIN_TRIALS = 3
MIN_TIMING_TRIALS = {"quick": 5, "full": 10}
TIMING_UNITS = frozenset({"s", "ms", "us", "tok/s", "tokens/s", "req/s", "steps/s"})
TIMING_WORDS = (
    "ttft",
    "tpot",
    "p50",
    "p99",
    "latency",
    "throughput",
    "goodput",
    "speedup",
    "wait",
    "step",
    "knee",
    "slo",
    "mfu",
    "host_share",
    "overlap",
)


def in_scope(scope: str, evidence: str) -> bool:
    """Whether measured ``evidence`` (cpu | gpu | tpu) may decide a claim scoped ``scope``."""
    if scope not in IN_SCOPE:
        raise ValueError(f"scope {scope!r} is not one of {sorted(IN_SCOPE)}")
    return evidence in IN_SCOPE[scope]


def is_timing(metric: str, unit: str) -> bool:
    """Whether ``metric`` (recorded in ``unit``) is a timing or throughput measurement."""
    name = metric.lower()
    return unit in TIMING_UNITS or any(word in name for word in TIMING_WORDS)


def min_trials(metric: str, unit: str, profile: str) -> int:
    """The fewest trials a measured condition on ``metric`` needs in a ``profile`` run.

    An unknown profile is held to the strictest rule (full's).
    """
    if not is_timing(metric, unit):
        return MIN_TRIALS
    return MIN_TIMING_TRIALS.get(profile, max(MIN_TIMING_TRIALS.values()))
