"""The step's end on the scheduler side (sched/update.py), on hand-made outputs: no device
step runs, so each token, stop and freed page is the test's own."""

from __future__ import annotations

import numpy as np
from engine_helpers import make_request, tiny_config

from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.outputs import FinishEvent, TokenEvent
from claimbench.engine.sched.scheduler import Scheduler
from claimbench.engine.sched.update import StepUpdater
from claimbench.engine.worker.batch import StepInputError, build_step
from claimbench.engine.worker.runner import StepOutput

STOP = 9


def _setup(*requests):
    config = tiny_config()
    scheduler = Scheduler(config, BlockManager(64, 8, "off"))
    for request in requests:
        scheduler.add(request)
    return config, scheduler, StepUpdater(scheduler, None, frozenset({2}), True)


def _outputs(plan, tokens):
    """The step's outputs as the runner returns them: one sampled token per slot."""
    slots = plan.seq_bucket
    sampled = np.zeros((slots, 1), np.int32)
    sampled[: len(tokens), 0] = tokens
    return StepOutput(
        tokens=sampled,
        logprobs=np.full((slots, 1), -0.5, np.float32),
        prompt_logprobs=None,
        prompt_top1=None,
        num_accepted=np.zeros(slots, np.int32),
        experts_touched=np.zeros(0, np.int32),
        exit_layers=np.zeros(0, np.int32),
    )


def _step(config, scheduler, updater, tokens, now):
    plan = build_step(config, scheduler.schedule(now).scheduled)
    events = []
    accepted = updater.update_from_output(plan, _outputs(plan, tokens), now, events)
    return events, accepted


def test_a_token_is_appended_reported_and_a_stop_finishes_and_frees():
    request = make_request(3, max_tokens=4, stop_token_ids=(STOP,))
    config, scheduler, updater = _setup(request)
    events, accepted = _step(config, scheduler, updater, [7], now=1.0)
    assert accepted == [0]
    assert events == [TokenEvent(request.request_id, 7, 0, 1.0, None)]
    # Verified K/V: the prompt; the sampled token is written by the next step.
    assert request.output_token_ids == [7] and request.num_computed_tokens == 3
    events, _ = _step(config, scheduler, updater, [STOP], now=2.0)
    assert events == [
        TokenEvent(request.request_id, STOP, 1, 2.0, None),
        FinishEvent(request.request_id, "stop", 2.0),
    ]
    assert request.is_finished and scheduler.block_manager.num_used_pages == 0
    assert not scheduler.has_unfinished


def test_a_request_that_fails_its_step_ends_alone():
    bad, good = make_request(3), make_request(3)
    config, scheduler, updater = _setup(bad, good)
    scheduled = scheduler.schedule(0.0)
    events = []
    updater.fail(scheduled, StepInputError([bad.request_id], "a value past int32"), events)
    assert [(e.request_id, e.reason) for e in events] == [(bad.request_id, "error")]
    assert bad.is_finished and not good.is_finished
