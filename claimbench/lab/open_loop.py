"""The service rate measured the way load is offered, and the load a trial really offered.

A closed burst (every request submitted at once, tenant_runs.measure_saturation) starts the
whole batch on prefill together and drains it together; served open loop, the same mix
arrives spread out, prefill and decode interleave, and the engine's rate differs (0.73 to
1.81 times the burst's figure in one stored run). A load given "in units of the service
rate" therefore needs the rate measured open loop:

* ``measure_service``: the mix's requests arrive as a poisson stream at OPEN_LOOP_LOAD times
  a rough estimate (a burst, or the previous trial's figure), so the queue never empties,
  and the rate is the output tokens per second of the steady stretch: steps that ran with a
  request waiting (the batch kept full) after the first request finished (the start-up, all
  prefill at once, is over; from then on requests join as others leave, prefill beside
  decode, as under any open-loop load).
* ``ServiceMeter``: one per experiment, measuring every trial's rate open loop (the host's
  speed drifts, and that drift belongs in the trials' spread); the first trial's stream is
  paced by a closed burst's rough figure, later ones by the previous trial's rate.
* ``realised_load``: what a trial's requests really asked for (their output tokens over the
  stretch they arrived in) over a measured service rate, so an experiment can record it per
  trial (``record_load``, RunContext.record_realised_load) and a trial whose poisson draw or
  drifting host put it off its nominal load is reported, not scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.lab import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec, offered_requests_per_s

if TYPE_CHECKING:
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.workload.build import WorkloadRequest

# Offered load over the rough estimate while measuring: above capacity even when the estimate
# overstates the open-loop rate 1.8 times, so the queue keeps the batch full.
OPEN_LOOP_LOAD = 2.0


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


def measure_service(
    engine: LLMEngine,
    spec: WorkloadSpec,
    num_requests: int,
    estimate: tr.Saturation,
    *,
    config: EngineConfig | None = None,
    via: str = "engine",
) -> tr.Saturation:
    """The engine's open-loop service rate on ``spec``'s mix: ``num_requests`` of its
    requests arriving at OPEN_LOOP_LOAD x ``estimate``, served from an emptied engine (under
    ``config``; ``via`` as tenant_runs.serve's), the rate taken over the steady stretch
    (``steady_service_tok_s``). ``num_requests`` should be several times max_num_seqs so
    that stretch spans many steps."""
    engine.reset(config)
    stream = dataclasses.replace(spec, max_requests=num_requests, max_duration_s=None)
    loaded = tr.at_load(stream, estimate, OPEN_LOOP_LOAD)
    requests = tr.workload_requests(loaded, engine.model_cfg.vocab_size)
    expected_s = estimate.seconds_for(len(requests))
    served = tr.serve(engine, requests, tr.safety_timeout_s(expected_s), via)
    tok_s = steady_service_tok_s(served)
    mean_output = tr.offered_output_tokens_per_s(spec) / offered_requests_per_s(spec)
    return tr.Saturation(
        output_tokens_per_s=tok_s, requests_per_s=tok_s / mean_output, num_requests=num_requests
    )


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


class ServiceMeter:
    """Each trial's open-loop service rate on one engine (``measure_service``), paced by a
    closed burst's figure the first time and by the previous trial's rate after that."""

    def __init__(
        self,
        engine: LLMEngine,
        num_requests: int,
        *,
        config: EngineConfig | None = None,
        via: str = "engine",
    ) -> None:
        self.engine, self.num_requests, self.config, self.via = engine, num_requests, config, via
        self.estimate: tr.Saturation | None = None  # the last rate measured

    def measure(self, spec: WorkloadSpec) -> tr.Saturation:
        """This trial's rate on ``spec``'s mix."""
        if self.estimate is None:
            self.estimate = tr.measure_saturation(
                self.engine, spec, self.num_requests, config=self.config, via=self.via
            )
        self.estimate = measure_service(
            self.engine, spec, self.num_requests, self.estimate, config=self.config, via=self.via
        )
        return self.estimate


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
    """Record the trial's realised load (its requests over [0, window_s) against the trial's
    measured ``service``) and whether it is within ``tolerance`` of ``target``."""
    realised = realised_load(requests, window_s, service.output_tokens_per_s)
    return ctx.record_realised_load(trial, realised, target=target, tolerance=tolerance)


def record_episode_load(
    ctx: RunContext,
    trial: int,
    requests: Sequence[WorkloadRequest],
    service: tr.Saturation,
    params: dict[str, Any],
    *,
    target: float | None = None,
) -> bool:
    """``record_load`` over an episode of ``params["episode_requests"]`` requests at the
    service rate, against ``target`` (default ``params["load"]``) within
    ``params["load_tolerance"]``."""
    return record_load(
        ctx,
        trial,
        requests,
        service.seconds_for(params["episode_requests"]),
        service,
        target=params["load"] if target is None else target,
        tolerance=params["load_tolerance"],
    )
