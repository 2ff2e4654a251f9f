"""The engine's service rate at saturation, measured in every trial apart from its load.

Load is given in units of this rate, so the rate must not depend on the load: a rate read
off a stream paced by an earlier estimate reads the pacing back when the stream under-loads
the engine, and an under-loaded trial then paces the next one lower still.
``measure_saturation`` keeps the engine full instead: a closed burst of the trial's own
length mix, at least BURST_BATCHES x max_num_seqs requests submitted at once to the emptied
engine, so the queue supplies a new request each time one finishes (a closed loop at
max_num_seqs). The rate is the output tokens per second of the steady stretch
(open_loop.steady_service_tok_s): the steps that ran with a request waiting after the first
request finished, when requests join as others leave, prefill beside decode. The start-up
(every slot on prefill at once) and the drain (a shrinking batch) are left out.

``SaturationMeter`` is one experiment's meter. A shared host's speed drifts by 10-15%
between bursts a few seconds apart (docs/performance/service_rate.md), so one burst is a
noisy reading of it; the meter keeps them apart and pools them. Each trial brackets its arms
with two bursts of its own mix, one just before and one just after, and its saturation is
their mean: the rate of the host while the trial ran, which its arrivals were not built
from. Its arrivals are built from the median of the readings of earlier trials (the last
POOL of them; before the first trial, of warm-up bursts run until two agree), so neither
one noisy burst nor an under-loaded trial sets the next trial's pace.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.load.open_loop import steady_service_tok_s
from claimbench.workload.spec import WorkloadSpec, offered_requests_per_s

if TYPE_CHECKING:
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.engine import LLMEngine

# Burst size in batches of max_num_seqs: the first batch is the start-up, the rest join one
# by one as others finish, so five batches' worth of admissions make the steady stretch.
BURST_BATCHES = 6
# A burst is served to completion; the deadline only stops a stalled engine.
BURST_TIMEOUT_S = 3600.0
# The readings a pace is the median of: the last two trials' brackets.
POOL = 4
# Warm-up: bursts until two in a row agree within WARM_AGREEMENT (relative), at most
# WARM_BURSTS; the first run after precompile runs cold, and a cold reading would set the
# first trial's pace.
WARM_AGREEMENT, WARM_BURSTS = 0.1, 5


def burst_size(num_requests: int, max_num_seqs: int) -> int:
    """The requests in a saturation burst: ``num_requests``, and never fewer than
    BURST_BATCHES x max_num_seqs (a smaller burst would never queue)."""
    if num_requests < 1 or max_num_seqs < 1:
        raise ValueError(
            f"a burst needs num_requests >= 1 and max_num_seqs >= 1, got {num_requests} "
            f"and {max_num_seqs}"
        )
    return max(num_requests, BURST_BATCHES * max_num_seqs)


def measure_saturation(
    engine: LLMEngine,
    spec: WorkloadSpec,
    num_requests: int,
    *,
    config: EngineConfig | None = None,
    via: str = "engine",
) -> tr.Saturation:
    """The engine's output tokens per second with its batch kept full on ``spec``'s mix.

    ``burst_size(num_requests, max_num_seqs)`` of the mix's requests are submitted at once
    to the emptied engine (under ``config`` if given; ``via`` as tenant_runs.serve's: over
    HTTP the rate is the server's) and served to completion; the rate is their steady
    stretch's (the module docstring). The engine is reset first, so no prefix cache warm
    from an earlier run skips prefill. requests_per_s divides by the mix's expected output
    length, the one tenant_runs.at_load scales rates by, so loads and service units agree.
    """
    engine.reset(config)
    size = burst_size(num_requests, engine.config.scheduler.max_num_seqs)
    burst = dataclasses.replace(spec, max_requests=size, max_duration_s=None)
    requests = [
        dataclasses.replace(r, arrival_s=0.0)
        for r in tr.workload_requests(burst, engine.model_cfg.vocab_size)
    ]
    served = tr.serve(engine, requests, BURST_TIMEOUT_S, via)
    if served.timed_out:
        raise ValueError(f"a saturation burst of {size} requests ran past {BURST_TIMEOUT_S} s")
    tok_s = steady_service_tok_s(served)
    mean_output = tr.offered_output_tokens_per_s(spec) / offered_requests_per_s(spec)
    return tr.Saturation(
        output_tokens_per_s=tok_s, requests_per_s=tok_s / mean_output, num_requests=size
    )


class SaturationMeter:
    """One experiment's saturation, trial by trial, on one engine.

    Per trial: ``pace`` (before the arms) is the rate to build the arrivals from, the median
    of the last POOL readings of earlier trials (or of the warm-up); it then measures the
    trial's first reading. ``measure`` (after the arms) takes the second and returns the
    trial's saturation, the mean of the two: realised load divides by it.
    """

    def __init__(
        self,
        engine: LLMEngine,
        num_requests: int,
        *,
        config: EngineConfig | None = None,
        via: str = "engine",
    ) -> None:
        self.engine, self.num_requests, self.config, self.via = engine, num_requests, config, via
        self.readings: list[tr.Saturation] = []  # every trial's readings, in order
        self.warm_up: list[tr.Saturation] = []  # the warm-up's, in order
        self._before: tr.Saturation | None = None

    def pace(self, spec: WorkloadSpec) -> tr.Saturation:
        """The rate to build this trial's arrivals from (then the trial's reading before its
        arms is taken)."""
        if not self.readings and not self.warm_up:
            self._warm(spec)
        pool = (self.readings or self.warm_up[-2:])[-POOL:]
        paced = pooled(pool)
        self._before = self._burst(spec)
        return paced

    def measure(self, spec: WorkloadSpec) -> tr.Saturation:
        """This trial's saturation on ``spec``'s mix: the mean of its readings before and
        after its arms. ValueError unless ``pace`` was called first in this trial."""
        if self._before is None:
            raise ValueError("measure() needs this trial's pace() first (its first reading)")
        before, after = self._before, self._burst(spec)
        self._before = None
        self.readings += [before, after]
        return pooled([before, after], mean=True)

    def _warm(self, spec: WorkloadSpec) -> None:
        self.warm_up.append(self._burst(spec))
        while len(self.warm_up) < WARM_BURSTS:
            self.warm_up.append(self._burst(spec))
            a, b = (r.output_tokens_per_s for r in self.warm_up[-2:])
            if abs(a - b) <= WARM_AGREEMENT * max(a, b):
                return

    def _burst(self, spec: WorkloadSpec) -> tr.Saturation:
        return measure_saturation(
            self.engine, spec, self.num_requests, config=self.config, via=self.via
        )


def pooled(readings: list[tr.Saturation], *, mean: bool = False) -> tr.Saturation:
    """One saturation from several readings of the same mix: their median (or ``mean``),
    with ``readings`` the output tokens per second of each."""
    if not readings:
        raise ValueError("pooled() needs at least one reading")
    tok_s = np.array([r.output_tokens_per_s for r in readings])
    per_request = readings[0].output_tokens_per_s / readings[0].requests_per_s
    rate = float(tok_s.mean() if mean else np.median(tok_s))
    return tr.Saturation(
        output_tokens_per_s=rate,
        requests_per_s=rate / per_request,
        num_requests=sum(r.num_requests for r in readings),
        readings=tuple(float(x) for x in tok_s),
    )
