"""A served run's steady stretch, and the load a trial really offered."""

import pandas as pd
import pytest

from claimbench.harness.context import RunContext
from claimbench.lab.load import open_loop
from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.build import WorkloadRequest


def served_run(starts, outputs, backlogged, first_finish_s):
    """A ServedRun whose steps start at ``starts`` with cumulative ``outputs`` (one tenant)
    and a waiting request where ``backlogged``; its first request finished at first_finish_s."""
    steps = pd.DataFrame(
        {"start_s": starts, "output_tokens.a": outputs, "backlogged.a": backlogged}
    )
    requests = pd.DataFrame({"finish_s": [first_finish_s, 9.0], "arrival_s": [0.0, 0.5]})
    return tr.ServedRun(requests, steps, duration_s=starts[-1], timed_out=False)


def test_steady_stretch_skips_the_start_up_and_the_drain():
    # Steps 0-1: start-up (all prefill, 1 token in 1 s); steps 2-4 queued after the first
    # finish (8 tokens per 1 s step); step 5 ran with nothing waiting (the drain), step 6 ends.
    served = served_run(
        starts=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0],
        outputs=[1, 2, 10, 18, 26, 27, 28],
        backlogged=[True, True, True, True, True, False, False],
        first_finish_s=2.0,
    )
    # Steps 2, 3, 4: 8 + 8 + 8 tokens in 3 s. A closed burst's figure over steps 0-4 would
    # be 26 / 5 = 5.2 tok/s: the start-up drags it down.
    assert open_loop.steady_service_tok_s(served) == pytest.approx(8.0)


def test_a_stream_that_never_queues_after_the_start_up_is_refused():
    served = served_run(
        starts=[0.0, 1.0, 2.0], outputs=[1, 2, 3], backlogged=[True, False, False],
        first_finish_s=1.0,
    )  # fmt: skip
    with pytest.raises(ValueError, match="did not keep the engine's queue full"):
        open_loop.steady_service_tok_s(served)


def request(arrival_s, max_tokens):
    return WorkloadRequest(arrival_s, "a", 0, (3, 4), max_tokens, 0)


def test_realised_load_is_what_the_arrivals_asked_for_over_the_service():
    requests = [request(0.0, 10), request(0.5, 30), request(1.5, 20), request(2.5, 99)]
    # Within [0, 2): 60 tokens in 2 s = 30 tok/s, over a 15 tok/s service: 2x.
    assert open_loop.offered_tok_s(requests, 2.0) == pytest.approx(30.0)
    assert open_loop.realised_load(requests, 2.0, 15.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="window_s must be > 0"):
        open_loop.offered_tok_s(requests, 0.0)


def test_a_trial_off_its_load_is_marked_and_one_on_it_is_not():
    ctx = RunContext(
        claim_id="degradation-ladder",
        profile="quick",
        params={},
        trials=2,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )
    service = tr.Saturation(output_tokens_per_s=10.0, requests_per_s=1.0, num_requests=8)
    # 60 tokens in 2 s over 10 tok/s: 3x, against a 2x target within 25%: off target.
    heavy = [request(0.0, 30), request(1.0, 30)]
    assert not open_loop.record_load(ctx, 0, heavy, 2.0, service, target=2.0, tolerance=0.25)
    # 40 tokens in 2 s: 2x, on target.
    assert open_loop.record_load(
        ctx, 1, [request(0.5, 40)], 2.0, service, target=2.0, tolerance=0.25
    )
    frame = ctx.measurements_frame("run")
    realised = frame[frame["metric"] == "realised_load"].sort_values("trial")
    assert list(realised["value"]) == pytest.approx([3.0, 2.0])
    assert list(frame.loc[frame["metric"] == "trial_off_target", "trial"]) == [0]


def test_an_episode_s_load_is_taken_against_the_trial_s_own_saturation():
    ctx = RunContext(
        claim_id="fair-victim",
        profile="quick",
        params={},
        trials=1,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )
    # Arrivals built from 10 tok/s (1 request/s): 4 episode requests span 4 s and ask for 40
    # tokens, 10 tok/s. The saturation measured in the trial is 20 tok/s: half that load.
    paced = tr.Saturation(output_tokens_per_s=10.0, requests_per_s=1.0, num_requests=8)
    service = tr.Saturation(output_tokens_per_s=20.0, requests_per_s=2.0, num_requests=8)
    episode = [request(float(t), 10) for t in range(4)]
    params = {"episode_requests": 4, "load": 1.0, "load_tolerance": 0.25}
    assert not open_loop.record_episode_load(ctx, 0, episode, paced, service, params)
    frame = ctx.measurements_frame("run")
    assert frame.loc[frame["metric"] == "realised_load", "value"].tolist() == pytest.approx([0.5])
