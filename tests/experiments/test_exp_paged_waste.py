"""paged-waste through the real engine: paged allocation against max-length reservation."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import shared_tiny_engine
from precision_helpers import ROOT, assert_claim_metrics_recorded, run_experiment, write_tiny_model

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.registry import load_experiment

# Lengths, page size and pool scaled far down; 200 queued requests outlast 90 steps either way.
PARAMS = {
    "prompt_mean": 10.0,
    "output_mean": 21.0,
    "max_model_len": 128,
    "max_tokens": 64,
    "page_size": 4,
    "pool_tokens": 512,
    "num_requests": 200,
    "num_steps": 90,
    "warmup_steps": 30,
    "max_num_seqs": 32,
    "engine": {"max_num_batched_tokens": 64},
}


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "paged-waste"))


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    return run_experiment("paged-waste", PARAMS, write_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.mark.slow
def test_paging_wastes_less_and_runs_more_on_the_same_workload(frame):
    values = assert_claim_metrics_recorded("paged-waste", frame)
    for paged, contiguous, ratio in zip(*values.values(), strict=True):
        assert paged < contiguous
        assert ratio > 1
    # 512 slots hold 4 reservations of max_model_len 128, but each request reserves its own
    # prompt + 64 (a prompt of about 10): more than 4 run at once, a number the prompts set.
    max_running = frame[frame["metric"] == "max_running"]
    contiguous = max_running[max_running["labels"].str.contains("contiguous")]
    assert (contiguous["value"] > 4).all() and (contiguous["value"] <= 512 // 65).all()


def test_occupancy_is_read_from_the_engines_pool():
    serve_backlog = _experiment().serve_backlog
    # Tiny f32 engine: 64 pages of 8 slots (63 usable), max_model_len 128 = 16 pages.
    engine = shared_tiny_engine(prefix_caching="off")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 97, int(n)).tolist() for n in rng.integers(4, 40, 60)]
    outputs = rng.integers(1, 60, 60).tolist()
    steps = {"num_steps": 40, "warmup_steps": 10}
    reserved = serve_backlog(engine, prompts, outputs, "reserve_max", **steps)
    # Every running request holds all 128 slots of its reservation, whatever it has computed.
    assert reserved.held_slots == round(reserved.mean_running * reserved.num_steps) * 128
    assert reserved.max_running == 3  # 63 usable pages: three reservations of 16
    paged = serve_backlog(engine, prompts, outputs, "paged", **steps)
    # Paged, each running request leaves at most its last page's unfilled tail.
    tails = paged.held_slots - paged.filled_slots
    assert 0 < tails < round(paged.mean_running * paged.num_steps) * 8
    assert paged.mean_running > reserved.mean_running
    assert not engine.has_unfinished  # the rest of the backlog was aborted


def test_reservation_is_the_cap_while_the_answer_ends_at_its_length():
    serve_backlog = _experiment().serve_backlog
    engine = shared_tiny_engine(prefix_caching="off")
    prompts = [list(range(3, 11))] * 12  # 8 tokens each
    outputs = [4] * 12
    steps = {"num_steps": 30, "warmup_steps": 2}
    # Each asks for 56 tokens: 8 + 56 = 64 slots = 8 pages reserved; 63 usable pages hold 7.
    reserved = serve_backlog(engine, prompts, outputs, "reserve_request", caps=[56] * 12, **steps)
    assert reserved.max_running == 7
    # Ended at 4 tokens, not run to 56: each answer's last token freed its reservation.
    done = engine.requests_frame()
    assert (done.loc[done["finish_reason"] == "answer-ended", "output_tokens"] <= 5).all()
    assert (done["finish_reason"] == "answer-ended").sum() >= 7
    with pytest.raises(ValueError, match="must be in"):
        serve_backlog(engine, prompts[:1], [9], "paged", caps=[8], **steps)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"page_size": 0}, "param page_size must be a positive integer, got 0"),
        ({"warmup_steps": 90}, "warmup_steps must be an integer in"),
        ({"pool_tokens": 64}, "holds no max_model_len"),
        ({"pool_token": 64}, "unknown param"),
    ],
)
def test_bad_params(tmp_path, params, message):
    with pytest.raises(ValueError, match=message):
        run_experiment("paged-waste", {**PARAMS, **params}, tmp_path)
