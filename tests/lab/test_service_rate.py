"""The saturation meter against known answers: a real engine on a clock that moves a known
time per executed step.

The engine is the tiny model's, unchanged, but the clock its steps and the replay client
read (each module's ``time``) is a fake one that advances only when the runner executes a
step, by that step's cost, and when the client sleeps. With max_num_seqs = 4 and a step
budget that holds every prompt whole beside the decodes, every step that runs with a request
waiting has all 4 sequences in it and each emits exactly one token (a decode, or a new
request's whole prompt), so at a fixed cost ``step_s`` the engine's true service rate is
4 / step_s output tokens per second, exactly, whatever the host's speed: the tests are
deterministic, not timed. Other clocks: a cost that grows with the step's tokens (prefill
costs: the answer depends on the mix, computed below), a cost that jitters step to step (a
noisy host: readings must agree), and a host that slows down for one trial (the trial's own
realised load must show it).
"""

from __future__ import annotations

import numpy as np
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
NUM_REQUESTS = 24  # six batches: the smallest burst
# Every load the load-controlled experiments offer (claims.yaml and their defaults): base and
# control 0.5, bucket-padding 0.7, heterogeneous-asset 0.8, tenant-tail-hidden 0.9,
# fair-victim 1.0, priority-aging 1.1 + 0.1, pool-quotas 1.5 + 0.1, overloads 2.0.
EXPERIMENT_LOADS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.2, 1.6, 2.0)


class StepClock:
    """perf_counter and sleep for the engine and the replay client: time moves by the
    cost of each executed step and by whatever is slept.

    A step costs ``step_s`` (``cold_s`` for the first ``num_cold`` steps, as a first run
    after precompile runs cold), plus ``per_token_s`` for each token it computes, times
    ``slowdown`` (a host's speed, changed by the test), times a lognormal factor of spread
    ``jitter`` drawn per step from a seeded generator."""

    def __init__(
        self,
        step_s: float,
        *,
        cold_s: float | None = None,
        num_cold: int = 0,
        per_token_s: float = 0.0,
        jitter: float = 0.0,
    ) -> None:
        self.now = 1000.0
        self.step_s, self.cold_s, self.num_cold = step_s, cold_s, num_cold
        self.per_token_s, self.jitter = per_token_s, jitter
        self.slowdown = 1.0
        self.rng = np.random.default_rng(0)
        self.num_steps = 0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)

    def execute_step(self, num_tokens: int) -> None:
        cold = self.num_steps < self.num_cold
        cost = (self.cold_s if cold else self.step_s) + self.per_token_s * num_tokens
        noise = self.rng.lognormal(0.0, self.jitter) if self.jitter else 1.0
        self.now += cost * self.slowdown * noise
        self.num_steps += 1


@pytest.fixture(scope="module")
def engine():
    # 4 prompts of up to 28 tokens fit one step's budget beside the decodes.
    return tiny_engine(max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=128)


def on_clock(monkeypatch, engine, clock: StepClock):
    """``engine`` with its steps (and the replay client's waits) on ``clock``."""
    execute = engine.runner.execute

    def timed_execute(inputs, *args, **kwargs):
        md = inputs.md
        clock.execute_step(int(np.asarray(md.cu_q_lens)[int(np.asarray(md.num_seqs)[0])]))
        return execute(inputs, *args, **kwargs)

    monkeypatch.setattr(engine.runner, "execute", timed_execute)
    monkeypatch.setattr(engine_module, "time", clock)
    monkeypatch.setattr(replay_module, "time", clock)
    return engine


def mix(seed: int, prompt_len=(2, 6), num_requests: int = NUM_REQUESTS) -> WorkloadSpec:
    tenants = (
        tr.poisson_tenant("a", 1.0, list(prompt_len), [8, 24]),
        tr.poisson_tenant("b", 1.0, list(prompt_len), [8, 24]),
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=num_requests)


def test_a_burst_reads_the_known_rate(monkeypatch, engine):
    on_clock(monkeypatch, engine, StepClock(STEP_S))
    rate = service_rate.measure_saturation(engine, mix(1), NUM_REQUESTS)
    assert rate.output_tokens_per_s == pytest.approx(TRUE_TOK_S, rel=0.05)
    assert rate.num_requests == NUM_REQUESTS
    # requests_per_s divides by the mix's mean output (16 tokens), as at_load scales by.
    assert rate.requests_per_s == pytest.approx(rate.output_tokens_per_s / 16.0)


def run_trials(engine, meter, load: float, num_trials: int, clock=None, slow_trial=None):
    """Trials as the experiments run them: paced, an episode of EPISODE requests' service at
    ``load``, its realised load against the trial's own saturation. ``slow_trial``: the
    clock's host runs 1.5x slower through that trial (its bursts and its episode)."""
    out = []
    for trial in range(num_trials):
        if clock is not None:
            clock.slowdown = 1.5 if trial == slow_trial else 1.0
        spec = mix(10 + trial)
        paced = meter.pace(spec)
        episode = tr.phased_requests(
            spec, paced, [tr.Phase(EPISODE, load)], engine.model_cfg.vocab_size
        )
        served = tr.serve(engine, episode, timeout_s=1e6)
        assert not served.timed_out
        service = meter.measure(spec)
        realised = open_loop.realised_load(
            episode, paced.seconds_for(EPISODE), service.output_tokens_per_s
        )
        out.append((paced, service, realised))
    return out


EPISODE = 48


@pytest.mark.parametrize("load", EXPERIMENT_LOADS)
def test_trials_at_every_experiment_load_read_the_known_rate(monkeypatch, engine, load):
    """Trial after trial, each paced by earlier trials' readings at ``load``, the rate stays
    at the known answer: a trial that under-loads the engine does not lower the next one's,
    and each trial's realised load is its target (the episode's work is exact)."""
    on_clock(monkeypatch, engine, StepClock(STEP_S))
    meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
    trials = run_trials(engine, meter, load, 3)
    for paced, service, realised in trials:
        assert paced.output_tokens_per_s == pytest.approx(TRUE_TOK_S, rel=0.05)
        assert service.output_tokens_per_s == pytest.approx(TRUE_TOK_S, rel=0.05)
        assert len(service.readings) == 2  # before and after the arms
        # Work within one request (24 tokens) of load x 48 x 16: 5% at load 0.5.
        assert realised == pytest.approx(load, rel=0.08)


def test_a_mix_with_costly_prefill_reads_its_own_rate(monkeypatch, engine):
    """Each computed token costs 5 ms beside a 20 ms step: prefill is most of the cost. In
    the steady state of a closed loop at 4 sequences, every step emits 4 tokens and computes
    4 x (E[prompt] + E[output] - 1) / E[output] tokens, so the rate is 4 / (step_s +
    per_token_s x that): prompts 16-28 (mean 22) and outputs 8-24 (mean 16) give 9.25 tokens
    a step, 60.4 tok/s, against 100 tok/s for decode alone. A meter that read the start-up
    (every slot on prefill) or a stretch where admissions cluster would read low."""
    clock = StepClock(0.02, per_token_s=0.005)
    on_clock(monkeypatch, engine, clock)
    tokens_per_step = MAX_NUM_SEQS * (22 + 16 - 1) / 16
    true_tok_s = MAX_NUM_SEQS / (0.02 + 0.005 * tokens_per_step)
    readings = [
        service_rate.measure_saturation(engine, mix(seed, (16, 28), 96), 96).output_tokens_per_s
        for seed in range(3)
    ]
    assert readings == pytest.approx([true_tok_s] * 3, rel=0.05)


def test_readings_of_a_jittery_host_agree(monkeypatch, engine):
    """Every step's cost drawn lognormal (spread 0.3, so its mean is exp(0.045) of step_s):
    a pace pools two bursts of about 60 steady steps each, so its noise is about
    0.3 / sqrt(120), under 3%: five meters' paces each read the mean rate within 8%, with a
    spread under 4%; a median of steps (not their total time) would read 4.5% high."""
    clock = StepClock(STEP_S, jitter=0.3)
    on_clock(monkeypatch, engine, clock)
    true_tok_s = TRUE_TOK_S / np.exp(0.3**2 / 2)
    paces = []
    for _ in range(5):
        meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
        paces.append(meter.pace(mix(3)).output_tokens_per_s)
        meter.measure(mix(3))
    assert paces == pytest.approx([true_tok_s] * 5, rel=0.08)
    assert np.std(paces) / np.mean(paces) < 0.04
    assert np.mean(paces) == pytest.approx(true_tok_s, rel=0.03)


def test_a_host_that_slows_under_one_trial_shows_in_that_trial_only(monkeypatch, engine):
    """The host runs 1.5x slower through trial 2 (its bursts and episode): that trial's
    realised load reads 1.5x its target (off any 25% tolerance), which its pace could not
    know; trial 3, paced by the median of trials 1 and 2, is back within 20%."""
    clock = StepClock(STEP_S)
    on_clock(monkeypatch, engine, clock)
    meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
    trials = run_trials(engine, meter, 1.0, 4, clock=clock, slow_trial=2)
    realised = [r for _, _, r in trials]
    assert realised[2] == pytest.approx(1.5, rel=0.08)
    assert realised[0] == pytest.approx(1.0, rel=0.08)
    assert realised[1] == pytest.approx(1.0, rel=0.08)
    assert abs(realised[3] - 1.0) < 0.2
    assert trials[2][1].output_tokens_per_s == pytest.approx(TRUE_TOK_S / 1.5, rel=0.05)


def test_one_stalled_burst_does_not_set_the_next_pace(monkeypatch, engine):
    """One reading taken while the host stalled (every step 3x) moves the median of four by
    less than a fifth: the next trial's pace stays within 10% of the true rate."""
    clock = StepClock(STEP_S)
    on_clock(monkeypatch, engine, clock)
    meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
    meter.pace(mix(1))
    meter.measure(mix(1))
    meter.pace(mix(2))
    clock.slowdown = 3.0  # the reading after trial 1's arms
    meter.measure(mix(2))
    clock.slowdown = 1.0
    assert meter.readings[-1].output_tokens_per_s == pytest.approx(TRUE_TOK_S / 3, rel=0.05)
    assert meter.pace(mix(3)).output_tokens_per_s == pytest.approx(TRUE_TOK_S, rel=0.1)


def test_measure_needs_the_trials_pace_first(engine):
    meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
    with pytest.raises(ValueError, match="pace"):
        meter.measure(mix(1))


def test_a_cold_first_run_does_not_set_the_scale(monkeypatch, engine):
    """The first 60 steps cost 4x (a cold start: about a whole burst): the meter's first pace
    still reads the warm rate, so the first trial is not under-loaded."""
    on_clock(monkeypatch, engine, StepClock(STEP_S, cold_s=4 * STEP_S, num_cold=60))
    meter = service_rate.SaturationMeter(engine, NUM_REQUESTS)
    assert meter.pace(mix(1)).output_tokens_per_s == pytest.approx(TRUE_TOK_S, rel=0.05)


def test_a_burst_is_never_smaller_than_six_batches():
    assert service_rate.burst_size(32, 4) == 32
    assert service_rate.burst_size(16, 4) == 24
    assert service_rate.burst_size(32, 32) == 192  # 32 at once would never queue
    with pytest.raises(ValueError, match="num_requests >= 1"):
        service_rate.burst_size(0, 4)
