"""The engine's boundary: malformed input leaves no state, and every event reaches a caller.

A server passes user input straight into ``add_request`` and streams the engine's events, so
these are the defects a fuzzer of the engine found: requests registered before a check raised,
configs swapped in before the scheduler built, coerced sampling numbers, and events lost
between ``step()`` and ``generate()``.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from engine_helpers import shared_tiny_engine

from claimbench.engine.config_tenants import Tenant
from claimbench.engine.outputs import FinishEvent, RejectEvent, TokenEvent
from claimbench.engine.sampling_params import SamplingParams


@pytest.mark.parametrize(
    "kwargs",
    [
        {"priority": None},
        {"priority": "high"},
        {"priority": True},
        {"tenant": None},
        {"tenant": ""},
        {"cache_salt": 7},
        {"sampling": {"max_tokens": 4}},
    ],
)
def test_bad_request_arguments_leave_no_state(kwargs):
    engine = shared_tiny_engine()
    with pytest.raises(ValueError):
        engine.add_request([3, 4, 5], **kwargs)
    assert engine.requests == {}
    assert not engine.has_unfinished
    assert dict(engine.scheduler.admission.num_admitted) == {}


@pytest.mark.parametrize(
    "prompt",
    [b"\x03\x04", {"ids": [3, 4]}, [3.0, 4.0], [3, True], 42],
)
def test_malformed_prompts_are_rejected_not_coerced(prompt):
    engine = shared_tiny_engine()
    with pytest.raises(ValueError, match="prompt"):
        engine.add_request(prompt)
    assert engine.requests == {}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 2.5),
        ("max_tokens", True),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("top_p", math.nan),
        ("top_k", 1.5),
        ("seed", 3.0),
        ("logprobs", 1),
        ("stop_token_ids", "ab"),
        ("stop_token_ids", (2.0,)),
    ],
)
def test_sampling_params_check_types_and_finiteness(field, value):
    with pytest.raises(ValueError, match=field.split("[")[0]):
        SamplingParams(**{field: value})


def test_sampling_params_still_take_numpy_integers():
    import numpy as np

    params = SamplingParams(max_tokens=np.int64(3), top_k=np.int32(2), temperature=np.float32(1))
    assert params.max_tokens == 3


def test_rejections_are_delivered_by_the_stepping_loop():
    """``while has_unfinished: step()`` must see a rejection even when nothing else runs."""
    engine = shared_tiny_engine()
    request_id = engine.add_request([3] * 200, SamplingParams(max_tokens=4))  # > max_model_len
    events = []
    while engine.has_unfinished:
        events.extend(engine.step())
    assert [type(e) for e in events] == [RejectEvent]
    assert events[0].request_id == request_id


def test_abort_event_reaches_the_next_step_and_unknown_ids_are_clear_errors():
    engine = shared_tiny_engine()
    request_id = engine.add_request([3, 4, 5], SamplingParams(max_tokens=8))
    engine.step()
    engine.abort(request_id)
    assert engine.has_unfinished  # the abort's event is still to be delivered
    events = engine.step()
    assert [(type(e), e.request_id) for e in events] == [(FinishEvent, request_id)]
    assert not engine.has_unfinished
    with pytest.raises(ValueError, match="no request 'req-999'"):
        engine.abort("req-999")


def test_generate_leaves_other_callers_events_to_the_next_step():
    engine = shared_tiny_engine()
    streamed = engine.add_request([5, 6, 7], SamplingParams(max_tokens=20, ignore_eos=True))
    rejected = engine.add_request([3] * 200, SamplingParams(max_tokens=4))
    (out,) = engine.generate([[8, 9]], SamplingParams(max_tokens=2, ignore_eos=True))
    assert len(out.token_ids) == 2
    events = []
    while engine.has_unfinished:
        events.extend(engine.step())
    mine = [e for e in events if e.request_id == streamed]
    # Every token of the streaming request arrives, in order, and then its finish.
    tokens = [e for e in mine if isinstance(e, TokenEvent)]
    assert [e.index for e in tokens] == list(range(20))
    assert isinstance(mine[-1], FinishEvent)
    assert any(isinstance(e, RejectEvent) and e.request_id == rejected for e in events)


def test_reset_with_a_config_the_scheduler_rejects_keeps_the_old_engine():
    engine = shared_tiny_engine()
    before = (engine.config, engine.scheduler, engine.block_manager)
    greedy_tenant = Tenant("big", guaranteed_pages=10_000)
    with pytest.raises(ValueError):
        engine.reset(dataclasses.replace(engine.config, tenants=(greedy_tenant,)))
    assert (engine.config, engine.scheduler, engine.block_manager) == before
