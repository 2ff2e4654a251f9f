"""The tenant-experiment helpers: service units, phased timelines, the fixed-step driver."""

import numpy as np
import pandas as pd
import pytest
from engine_helpers import tiny_engine

from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.load.step_driver import serve_by_step
from claimbench.workload.build import WorkloadRequest
from claimbench.workload.spec import WorkloadSpec

SLOW = tr.Saturation(output_tokens_per_s=80.0, requests_per_s=8.0, num_requests=16)
FAST = tr.Saturation(output_tokens_per_s=160.0, requests_per_s=16.0, num_requests=16)


def mix(seed=5):
    tenants = (
        tr.poisson_tenant("a", 1.0, [4, 8], [6, 14]),
        tr.poisson_tenant("b", 1.0, [4, 8], [6, 14]),
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=16)


def test_seconds_for_is_requests_over_the_service_rate():
    assert SLOW.seconds_for(24) == 3.0 and FAST.seconds_for(24) == 1.5
    with pytest.raises(ValueError, match="num_requests must be >= 0"):
        SLOW.seconds_for(-1)


def test_a_faster_engine_gets_the_same_requests_in_proportionally_less_time():
    phases = [tr.Phase(20, 2.0), tr.Phase(10, 0.5)]
    slow = tr.phased_requests(mix(), SLOW, phases, vocab_size=97)
    fast = tr.phased_requests(mix(), FAST, phases, vocab_size=97)
    assert [r.prompt_token_ids for r in slow] == [r.prompt_token_ids for r in fast]
    assert [r.arrival_s for r in fast] == pytest.approx([r.arrival_s / 2 for r in slow])
    assert [r.request_index for r in slow] == list(range(len(slow)))


def test_phases_set_the_arrival_rate_of_their_stretch():
    phases = [tr.Phase(200, 2.0), tr.Phase(200, 0.5)]
    requests = tr.phased_requests(mix(), SLOW, phases, vocab_size=97)
    boundary_s = SLOW.seconds_for(200)  # 25 s
    first = sum(r.arrival_s < boundary_s for r in requests)
    second = len(requests) - first
    # 2x and 0.5x of 8 requests/s for 25 s each: about 400 and 100 arrivals.
    assert 340 < first < 460 and 70 < second < 130
    assert max(r.arrival_s for r in requests) < 2 * boundary_s


def test_step_driver_serves_the_same_schedule_every_time():
    engine = tiny_engine(max_num_seqs=2)
    arrivals = [
        (step // 2, WorkloadRequest(0.0, f"t{step % 2}", 0, tuple(range(3, 9)), 4, step))
        for step in range(10)
    ]
    runs = [serve_by_step(engine, arrivals, max_steps=200) for _ in range(2)]
    columns = ["tenant", "arrival_step", "first_token_step", "finish_step", "finish_reason"]
    assert runs[0].requests[columns].equals(runs[1].requests[columns])
    assert runs[0].num_steps == runs[1].num_steps
    assert (runs[0].ttft_steps >= 0).all() and (runs[0].requests["finish_reason"] == "length").all()
    # Two sequences at once, one arriving per step, four steps each: a queue forms.
    assert runs[0].ttft_steps.max() > 2
    with pytest.raises(ValueError, match="unfinished after 3"):
        serve_by_step(engine, arrivals, max_steps=3)


def test_backlogged_throughput_counts_only_steps_that_ran_with_a_request_waiting():
    steps = pd.DataFrame(
        {
            "start_s": [0.0, 1.0, 3.0, 4.0, 10.0],
            # Cumulative: the steps made 2, 4, 1, 6 and 3 tokens.
            "output_tokens.a": [2, 4, 4, 8, 11],
            "output_tokens.b": [0, 2, 3, 5, 5],
            "backlogged.a": [True, False, False, True, True],
            "backlogged.b": [False, True, False, False, False],
        }
    )
    # Steps 0, 1 and 3 were backlogged (2 + 4 + 6 tokens over 1 + 2 + 6 s); step 2 was not,
    # and step 4 has no successor to time it.
    assert tr.backlogged_throughput(steps) == pytest.approx(12 / 9)
    never = steps.assign(**{"backlogged.a": False, "backlogged.b": False})
    with pytest.raises(ValueError, match="did not overload"):
        tr.backlogged_throughput(never)


@pytest.mark.parametrize("seed", range(6))
def test_each_phase_offers_its_load_whatever_the_draw(seed):
    """A phase of D seconds at load L brings D x L x saturation output tokens, within one
    request's tokens (the draw's luck does not move a trial's load); its gaps stay random."""
    phases = [tr.Phase(24, 2.0), tr.Phase(24, 0.5), tr.Phase(20, 1.2)]
    requests = tr.phased_requests(mix(seed), SLOW, phases, vocab_size=97)
    start_s = 0.0
    for phase in phases:
        wall_s = SLOW.seconds_for(phase.service_requests)
        inside = [r for r in requests if start_s <= r.arrival_s < start_s + wall_s]
        work = phase.load * wall_s * SLOW.output_tokens_per_s
        # Each cut is placed within half a request of its work: one request's tokens at most.
        assert abs(sum(r.max_tokens for r in inside) - work) <= 14
        gaps = np.diff([r.arrival_s for r in inside])
        assert gaps.std() > 0.5 * gaps.mean()  # poisson-like gaps, not a metronome
        start_s += wall_s
    assert [r.request_index for r in requests] == list(range(len(requests)))
