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

``SaturationMeter`` is one experiment's meter: a trial's arrivals are built from the
saturation measured just before it (the previous trial's), and its realised load is taken
against the saturation measured in the trial itself, after its arms, which the arrivals
were not built from; so a trial that a drifting host or a noisy burst put off its nominal
load shows as off target.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.load.open_loop import steady_service_tok_s
from claimbench.workload.spec import WorkloadSpec, offered_requests_per_s

if TYPE_CHECKING:
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.engine import LLMEngine

# Burst size in batches of max_num_seqs: the first batch is the start-up, the rest join one
# by one as others finish, so two batches' worth of admissions make the steady stretch.
BURST_BATCHES = 3
# A burst is served to completion; the deadline only stops a stalled engine.
BURST_TIMEOUT_S = 3600.0


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

    ``pace`` is the rate a trial's arrivals are built from: the last ``measure``'s, or
    before the first trial a burst measured then, after one unmeasured burst (the first
    run after precompile runs cold). ``measure`` is the trial's own saturation, measured
    after its arms whatever load they ran at; the trial's realised load divides by it and
    the next trial is paced by it.
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
        self.last: tr.Saturation | None = None  # the last saturation measured

    def pace(self, spec: WorkloadSpec) -> tr.Saturation:
        """The rate to build this trial's arrivals from."""
        if self.last is None:
            self._burst(spec)  # warms the engine's programs; its rate runs cold
            self.last = self._burst(spec)
        return self.last

    def measure(self, spec: WorkloadSpec) -> tr.Saturation:
        """This trial's own saturation on ``spec``'s mix (and the next trial's pace)."""
        self.last = self._burst(spec)
        return self.last

    def _burst(self, spec: WorkloadSpec) -> tr.Saturation:
        return measure_saturation(
            self.engine, spec, self.num_requests, config=self.config, via=self.via
        )
