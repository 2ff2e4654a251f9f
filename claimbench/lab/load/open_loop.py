"""The steady stretch of a served run, and the load a trial really offered.

* ``steady_service_tok_s``: output tokens per second over the steps that ran with a request
  waiting (the batch kept full) after the first request finished (the start-up, all
  prefill at once, is over; from then on requests join as others leave, prefill beside
  decode). service_rate.measure_saturation reads a closed burst's rate with it.
* ``realised_load``: what a trial's requests really asked for (their output tokens over the
  stretch they arrived in) over a measured service rate, so an experiment can record it per
  trial (``record_load``, RunContext.record_realised_load) and a trial whose poisson draw or
  drifting host put it off its nominal load is reported, not scored. The rate is the
  saturation measured in the trial itself (service_rate.SaturationMeter.measure), not the
  one its arrivals were built from: over that one a trial would be on target by
  construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.lab.load import tenant_runs as tr

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext
    from claimbench.workload.build import WorkloadRequest


def steady_service_tok_s(served: tr.ServedRun) -> float:
    """Output tokens per second over the steady stretch of ``served``: steps with a request
    waiting, after its first request finished (the engine's clock, as both frames keep it).
    ValueError when no step qualifies."""
    steps = served.steps
    if len(steps) < 2:
        raise ValueError(f"a run of {len(steps)} steps has no timed stretch")
    first_finish = float(served.requests["finish_s"].min())
    start = steps["start_s"].to_numpy(float)
    inside = start >= first_finish
    outputs, queued = tr.outputs_and_backlog(steps)
    made = np.diff(outputs, prepend=0.0)[:-1]
    took = np.diff(start)
    steady = (queued & inside)[:-1]
    if not steady.any():
        raise ValueError(
            f"no step of {len(steps)} ran with a request waiting after the first finish "
            f"({first_finish:.3f} s): the stream did not keep the engine's queue full"
        )
    return tr.ratio(float(made[steady].sum()), float(took[steady].sum()))


def offered_tok_s(requests: Sequence[WorkloadRequest], window_s: float) -> float:
    """Output tokens per second the requests arriving within [0, window_s) ask for."""
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    return sum(r.max_tokens for r in requests if r.arrival_s < window_s) / window_s


def realised_load(
    requests: Sequence[WorkloadRequest], window_s: float, service_tok_s: float
) -> float:
    """The load the requests really offered over [0, window_s), in units of a measured
    service rate (output tokens per second)."""
    return tr.ratio(offered_tok_s(requests, window_s), service_tok_s)


def record_load(
    ctx: RunContext,
    trial: int,
    requests: Sequence[WorkloadRequest],
    window_s: float,
    service: tr.Saturation,
    *,
    target: float,
    tolerance: float,
) -> bool:
    """Record the trial's realised load (its requests over [0, window_s) against the
    saturation ``service`` measured in the trial) and whether it is within ``tolerance`` of
    ``target``."""
    realised = realised_load(requests, window_s, service.output_tokens_per_s)
    return ctx.record_realised_load(
        trial,
        realised,
        target=target,
        tolerance=tolerance,
        service_tok_s=service.output_tokens_per_s,
        readings_tok_s=list(service.readings),
    )


def record_episode_load(
    ctx: RunContext,
    trial: int,
    requests: Sequence[WorkloadRequest],
    paced: tr.Saturation,
    service: tr.Saturation,
    params: dict[str, Any],
    *,
    target: float | None = None,
) -> bool:
    """``record_load`` over an episode of ``params["episode_requests"]`` requests at the
    ``paced`` rate (the one its arrivals were built from), against the trial's measured
    ``service``, on ``target`` (default ``params["load"]``) within
    ``params["load_tolerance"]``."""
    return record_load(
        ctx,
        trial,
        requests,
        paced.seconds_for(params["episode_requests"]),
        service,
        target=params["load"] if target is None else target,
        tolerance=params["load_tolerance"],
    )
