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


# Positive controls. A "never" condition (``metric <= 0``) seen at zero is only evidence if the
# same measurement, in the same trial, sees the event under a setting where it can happen: the
# experiment records that as ``<metric>_control``. Zero with a control that fired in every
# scored trial holds; zero with a silent or missing control is unclear (scoring.py).
CONTROL_SUFFIX = "_control"

# Realised load. An experiment offering a load relative to a measured service rate records the
# realised ratio per trial (REALISED_LOAD, unit "x"); a trial off its target by more than the
# stated tolerance also records OFF_TARGET = 1 and did not run the design: scoring drops every
# value of that trial and reports it as failed to run.
REALISED_LOAD = "realised_load"
OFF_TARGET = "trial_off_target"


# Counts behind a share. An experiment recording a share of a whole (unit "%" or "share": SLO
# attainment, an attack's accuracy) also records, per trial, how many of the whole succeeded and
# the whole's size, unit "count": ``<metric>_successes`` and ``<metric>_total``. Scoring then pools
# the counts over trials (intervals.pooled_share_interval) rather than averaging trial shares.
SUCCESSES_SUFFIX = "_successes"
TOTAL_SUFFIX = "_total"


def count_metrics(metric: str) -> tuple[str, str]:
    """The names an experiment records the counts of share ``metric`` under."""
    return f"{metric}{SUCCESSES_SUFFIX}", f"{metric}{TOTAL_SUFFIX}"


def control_metric(metric: str) -> str:
    """The metric an experiment records as the positive control of ``metric``."""
    return f"{metric}{CONTROL_SUFFIX}"


def on_target(realised: float, target: float, tolerance: float) -> bool:
    """Whether a realised load is within ``tolerance`` (relative) of ``target``."""
    if target <= 0 or tolerance < 0:
        raise ValueError(f"need target > 0 and tolerance >= 0, got {target} and {tolerance}")
    return abs(realised / target - 1.0) <= tolerance


# Model class, beside the hardware scope. A condition whose mechanism depends on the size of the
# model the claim is about names that class in claims.yaml (``model_class: 8b``): quantization
# error grows with the outlier features of larger models; batching, speculation, early exit, the
# roofline, host share and fp16 against bf16 are about decode that streams weights from memory,
# which a model of a few million parameters never does (its steps are bound by kernel launches).
# Only measurements of a model of that class decide it: a parameter count within
# MODEL_CLASS_FACTOR of the class's nominal size. Measurements of another model are shown,
# labelled, and decide nothing.
MODEL_CLASSES = {
    "1b": 1e9,
    "8b": 8e9,
    # An 8-expert top-2 mixture with an 8B dense model's active parameters stores about 28B.
    "30b": 30e9,
    "70b": 70e9,
}  # nominal parameter counts
MODEL_CLASS_FACTOR = 2.0


def in_model_class(model_class: str, num_params: int | None) -> bool:
    """Whether a model of ``num_params`` parameters (None: unknown) is of ``model_class``."""
    if model_class not in MODEL_CLASSES:
        raise ValueError(f"model class {model_class!r} is not one of {sorted(MODEL_CLASSES)}")
    if num_params is None:
        return False
    nominal = MODEL_CLASSES[model_class]
    return nominal / MODEL_CLASS_FACTOR <= num_params <= nominal * MODEL_CLASS_FACTOR
