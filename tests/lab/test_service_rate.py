"""The saturation meter against a known answer: a real engine on a clock that moves a fixed
time per executed step.

The engine is the tiny model's, unchanged, but the clock its steps and the replay client
read (each module's ``time``) is a fake one that advances only when the runner executes a
step, by ``step_s``, and when the client sleeps. With max_num_seqs = 4, prompts of at most
6 tokens and a 32-token step budget, every step that runs with a request waiting has all
4 sequences in it and each emits exactly one token (a decode, or a new request's whole
prompt, which fits), so the engine's true service rate is 4 / step_s output tokens per
second, exactly, whatever the host's speed: the test is deterministic, not timed.
"""

from __future__ import annotations

import pytest
from engine_helpers import tiny_engine

import claimbench.engine.engine as engine_module
import claimbench.serving.clients.replay as replay_module
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.spec import WorkloadSpec

MAX_NUM_SEQS = 4
STEP_S = 0.05
TRUE_TOK_S = MAX_NUM_SEQS / STEP_S  # one token per sequence per step
NUM_REQUESTS = 16
# Every load the load-controlled experiments offer (claims.yaml and their defaults): base and
# control 0.5, bucket-padding 0.7, heterogeneous-asset 0.8, tenant-tail-hidden 0.9,
# fair-victim 1.0, priority-aging 1.1 + 0.1, pool-quotas 1.5 + 0.1, overloads 2.0.
EXPERIMENT_LOADS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.2, 1.6, 2.0)


class StepClock:
    """perf_counter and sleep for the engine and the replay client: time moves by the
    cost of each executed step (``cold_s`` for the first ``num_cold`` steps, as a first
    run after precompile runs cold, then ``step_s``) and by whatever is slept."""

    def __init__(self, step_s: float, *, cold_s: float | None = None, num_cold: int = 0) -> None:
        self.now = 1000.0
        self.step_s, self.cold_s, self.num_cold = step_s, cold_s, num_cold
        self.num_steps = 0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)

    def execute_step(self) -> None:
        cold = self.num_steps < self.num_cold
        self.now += self.cold_s if cold else self.step_s
        self.num_steps += 1


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=32)


def on_clock(monkeypatch, engine, clock: StepClock):
    """``engine`` with its steps (and the replay client's waits) on ``clock``."""
    execute = engine.runner.execute

    def timed_execute(*args, **kwargs):
        clock.execute_step()
        return execute(*args, **kwargs)

    monkeypatch.setattr(engine.runner, "execute", timed_execute)
    monkeypatch.setattr(engine_module, "time", clock)
    monkeypatch.setattr(replay_module, "time", clock)
    return engine


def mix(seed: int) -> WorkloadSpec:
    tenants = (
        tr.poisson_tenant("a", 1.0, [2, 6], [8, 24]),
        tr.poisson_tenant("b", 1.0, [2, 6], [8, 24]),
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=NUM_REQUESTS)


def test_a_burst_reads_the_known_rate(monkeypatch, engine):
    on_clock(monkeypatch, engine, StepClock(STEP_S))
    rate = service_rate.measure_saturation(engine, mix(1), NUM_REQUESTS)
    assert rate.output_tokens_per_s == pytest.approx(TRUE_TOK_S, rel=0.05)
    assert rate.num_requests == NUM_REQUESTS
    # requests_per_s divides by the mix's mean output (16 tokens), as at_load scales by.
    assert rate.requests_per_s == pytest.approx(rate.output_tokens_per_s / 16.0)


@pytest.mark.parametrize("load", EXPERIMENT_LOADS)
def test_trials_at_every_experiment_load_read_the_known_rate(monkeypatch, engine, load):
    """Trial after trial, each paced at ``load`` x the last rate measured, the rate stays at
    the known answer: a trial that under-loads the engine does not lower the next one's."""
    on_clock(monkeypatch, engine, StepClock(STEP_S))
    meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
    readings = []
    for trial in range(3):
        spec = mix(10 + trial)
        paced = meter.pace(spec)
        episode = tr.phased_requests(
            spec, paced, [tr.Phase(NUM_REQUESTS, load)], engine.model_cfg.vocab_size
        )
        served = tr.serve(engine, episode, timeout_s=1e6)
        assert not served.timed_out
        readings.append(meter.measure(spec).output_tokens_per_s)
        realised = open_loop.realised_load(episode, paced.seconds_for(NUM_REQUESTS), readings[-1])
        assert realised == pytest.approx(load, rel=0.5)  # a 16-request poisson draw
    assert readings == pytest.approx([TRUE_TOK_S] * 3, rel=0.05)


def test_a_cold_first_run_does_not_set_the_scale(monkeypatch, engine):
    """The first 60 steps cost 4x (a cold start: about a whole burst): the meter's first pace
    still reads the warm rate, so the first trial is not under-loaded."""
    on_clock(monkeypatch, engine, StepClock(STEP_S, cold_s=4 * STEP_S, num_cold=60))
    meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
    assert meter.pace(mix(1)).output_tokens_per_s == pytest.approx(TRUE_TOK_S, rel=0.05)


def test_a_burst_is_never_smaller_than_three_batches():
    assert service_rate.burst_size(16, 4) == 16
    assert service_rate.burst_size(32, 32) == 96  # 32 at once would never queue
    with pytest.raises(ValueError, match="num_requests >= 1"):
        service_rate.burst_size(0, 4)
