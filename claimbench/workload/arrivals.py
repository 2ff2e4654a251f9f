"""Synthetic arrival processes: poisson, gamma (bursty) and constant rate.

Gamma follows vLLM's serving benchmark (vllm/benchmarks/serve.py): inter-arrival gaps
are Gamma(shape=burstiness, scale=1 / (rate * burstiness)), so the mean gap is always
1 / rate and the coefficient of variation of the gaps is 1 / sqrt(burstiness).
burstiness = 1 is the exponential (poisson), < 1 is burstier, > 1 smoother.
Poisson is drawn as that same gamma with shape 1, so gamma(burstiness=1) and poisson
give identical arrivals for the same generator.

Unlike vLLM we do not rescale the cumulative gaps to end exactly at n / rate: a run
bounded by duration has no n to rescale to, and the spread of the realised rate across
seeds is part of what a bursty workload is.
"""

from __future__ import annotations

import math

import numpy as np

from claimbench.workload.validation import check_int, check_positive

ARRIVAL_KINDS = ("poisson", "gamma", "constant")

# A duration-bounded process draws about rate * duration gaps; past this many a typo in
# rate or duration would exhaust host memory before it failed.
MAX_ARRIVALS = 10_000_000


def arrival_times(
    kind: str,
    rate: float,
    rng: np.random.Generator,
    *,
    burstiness: float = 1.0,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """f64[num_arrivals] non-decreasing arrival times in seconds from the start of the run.

    Bounded by ``num_requests`` (the first n arrivals), by ``duration_s`` (arrivals in
    [0, duration_s)) or both. poisson and gamma place the first arrival one sampled gap
    after 0; constant places arrivals at k / rate from k = 0, so that it, like the others,
    offers rate * duration_s requests on average in [0, duration_s). The first k arrivals
    are the same whichever bound cut them, so raising a bound only appends arrivals.
    """
    if kind not in ARRIVAL_KINDS:
        raise ValueError(f"arrival kind must be one of {ARRIVAL_KINDS}, got {kind!r}")
    rate = check_positive("arrival_times", "rate", rate)
    burstiness = check_positive("arrival_times", "burstiness", burstiness)
    if kind != "gamma" and burstiness != 1.0:
        raise ValueError(f"burstiness={burstiness} applies only to gamma arrivals, not {kind!r}")
    if num_requests is None and duration_s is None:
        raise ValueError("arrival_times needs num_requests or duration_s to bound the run")
    if num_requests is not None:
        num_requests = check_int("arrival_times", "num_requests", num_requests, minimum=0)
    if duration_s is not None:
        duration_s = check_positive("arrival_times", "duration_s", duration_s)
    if num_requests is None and rate * duration_s > MAX_ARRIVALS:
        raise ValueError(
            f"rate={rate} over duration_s={duration_s} is ~{rate * duration_s:.3g} arrivals, "
            f"more than {MAX_ARRIVALS}"
        )

    if kind == "constant":
        bounds = [num_requests, None if duration_s is None else math.ceil(rate * duration_s) + 1]
        count = min(b for b in bounds if b is not None)
        times = np.arange(count, dtype=np.float64) / rate
    else:
        times = _gamma_times(rate, burstiness, rng, num_requests, duration_s)
    if duration_s is not None:
        times = times[times < duration_s]
    return times[:num_requests] if num_requests is not None else times


def _gamma_times(
    rate: float,
    shape: float,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
) -> np.ndarray:
    """f64[m] cumulative gamma gaps: exactly num_requests of them, or enough to pass duration_s."""
    scale = 1.0 / (rate * shape)
    if num_requests is not None and (duration_s is None or num_requests <= rate * duration_s):
        return np.cumsum(rng.gamma(shape, scale, size=num_requests))
    # Draw in chunks until the sum passes the duration. The gaps are one sequential stream
    # whatever the chunking, and one cumsum over all of them keeps the float sums equal to
    # those of a count-bounded draw of the same length.
    chunks: list[np.ndarray] = []
    total = 0.0
    while total < duration_s:
        expected = rate * (duration_s - total)
        chunk = rng.gamma(shape, scale, size=int(expected * 1.1) + 16)
        chunks.append(chunk)
        total += float(chunk.sum())
    return np.cumsum(np.concatenate(chunks))
