"""Every argument of add_request is a boundary: a random value is either refused there
(ValueError or TypeError, nothing registered) or served, and the engine serves a normal
request afterwards."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from engine_helpers import TINY_MODEL, shared_tiny_engine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claimbench.engine.config_tenants import Tenant
from claimbench.engine.sampling_params import SamplingParams

NORMAL = SamplingParams(max_tokens=2, ignore_eos=True)
MAX_STEPS = 400  # a tiny engine serves any admitted request (<= 128 tokens) well within

# Numbers around every edge the scheduler's arithmetic and the step's int32/uint32 arrays have.
EDGES = [0, 1, -1, 2, 127, 128, 129, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, -(2**63), 10**400]
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(EDGES),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.5, 1e308, -0.0]),
    st.text(max_size=3),
    st.lists(st.integers(-3, 3), max_size=2),
)
TOKEN = st.one_of(st.integers(0, TINY_MODEL.vocab_size - 1), st.sampled_from(EDGES), WEIRD)


SAMPLING_GOOD = {
    "max_tokens": st.integers(1, 140),
    "temperature": st.floats(0, 3),
    "top_k": st.integers(0, 200),
    "top_p": st.floats(0, 1),
    "seed": st.integers(0, 2**32 - 1),
    "stop_token_ids": st.lists(st.integers(0, TINY_MODEL.vocab_size - 1), max_size=3),
    "ignore_eos": st.booleans(),
    "logprobs": st.booleans(),
    "prompt_logprobs": st.booleans(),
}
ARGS_GOOD = {
    "prompt": st.lists(st.integers(0, TINY_MODEL.vocab_size - 1), min_size=1, max_size=140),
    "tenant": st.sampled_from(["default", "gold", "t"]),
    "priority": st.integers(-3, 5),
    "arrival_time": st.one_of(st.none(), st.floats(-1e6, 1e6)),
    "cache_salt": st.one_of(st.none(), st.text(max_size=4)),
}
ODD = {"prompt": st.one_of(WEIRD, st.lists(TOKEN, max_size=140)), "stop_token_ids": st.lists(TOKEN)}


def _one_odd(good: dict) -> st.SearchStrategy[dict]:
    """Good values but one argument, drawn from odd ones: each example probes one boundary
    (several odd arguments at once would mostly be refused by the first check)."""

    def with_odd(name: str) -> st.SearchStrategy[dict]:
        odd = st.one_of(WEIRD, st.sampled_from(EDGES), ODD.get(name, WEIRD))
        return st.fixed_dictionaries({**good, name: odd})

    return st.sampled_from(sorted(good)).flatmap(with_odd)


SAMPLING_FIELDS = _one_odd(SAMPLING_GOOD)
ARGS = _one_odd(ARGS_GOOD)


@pytest.fixture
def engine():
    # Tenants with quotas and token rates, priority-aging and the prefix cache: every
    # argument reaches some arithmetic.
    tenants = (Tenant("gold", priority=0, guaranteed_pages=4, burst_pages=20, token_rate=500.0),)
    return shared_tiny_engine(
        tenants=tenants,
        scheduling_policy="priority-aging",
        prefix_caching="salted",
        async_scheduling=False,
    )


def _serve(engine) -> None:
    for _ in range(MAX_STEPS):
        if not engine.has_unfinished:
            return
        engine.step()
    raise AssertionError(f"still unfinished after {MAX_STEPS} steps: {engine.stats()}")


FUZZ = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _refused_or_served(engine, sampling_fields: dict, args: dict) -> None:
    """Refused where it enters (nothing registered), or served; then a normal request is."""
    engine.reset()
    try:
        sampling = SamplingParams(**sampling_fields)
        request_id = engine.add_request(sampling=sampling, **args)
    except (ValueError, TypeError):
        assert engine.requests == {}
    else:
        _serve(engine)
        assert engine.requests[request_id].is_finished
    normal = engine.add_request([3, 4, 5], NORMAL)
    _serve(engine)
    assert engine.output(normal).token_ids and engine.output(normal).finish_reason == "length"


@FUZZ
@given(fields=SAMPLING_FIELDS)
def test_any_sampling_values_are_refused_or_served(engine, fields):
    _refused_or_served(engine, fields, {"prompt": [5, 6, 7]})


@FUZZ
@given(args=ARGS)
def test_any_request_arguments_are_refused_or_served(engine, args):
    _refused_or_served(engine, {"max_tokens": 3, "temperature": 0.7, "seed": 1}, args)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"arrival_time": "soon"},
        {"arrival_time": math.nan},
        {"arrival_time": math.inf},
        {"arrival_time": True},
        {"arrival_time": 10**400},
        {"priority": 10**400},
        {"priority": 2**31},
    ],
)
def test_values_that_broke_every_step_are_refused(engine, kwargs):
    engine.reset()
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        engine.add_request([3, 4], NORMAL, **kwargs)
    assert engine.requests == {}


def test_other_entry_points_refuse_malformed_arguments(engine):
    engine.reset()
    request_id = engine.add_request([3, 4], NORMAL)
    for call in (
        lambda: engine.abort(7),
        lambda: engine.abort(request_id, reason=None),
        lambda: engine.abort(request_id, reason=""),
        lambda: engine.rejection(["req-0"]),
        lambda: engine.forget({}),
        lambda: engine.trim_step_records(2.5),
        lambda: engine.trim_step_records(True),
        lambda: engine.reset({"seed": 1}),
    ):
        with pytest.raises(ValueError):
            call()
    _serve(engine)
    assert engine.output(request_id).finish_reason == "length"


@pytest.mark.parametrize(
    "value",
    [np.int16(32767), np.int32(2**31 - 1), np.uint8(250), np.int64(40), np.uint16(65534)],
)
def test_numpy_integers_are_stored_as_python_ints(value):
    # A numpy integer passes the range checks but would wrap in the scheduler's sums
    # (prompt + max_tokens in int16 is negative) and break every later step.
    params = SamplingParams(max_tokens=value, top_k=value, seed=value)
    for name in ("max_tokens", "top_k", "seed"):
        assert type(getattr(params, name)) is int and getattr(params, name) == int(value)


def test_numpy_max_tokens_cannot_wedge_the_engine():
    engine = shared_tiny_engine()
    with contextlib.suppress(ValueError):  # refused (too long for the pool) is fine
        engine.add_request([3, 4, 5, 6], SamplingParams(max_tokens=np.int16(32767)))
    canary = engine.add_request([3, 4], SamplingParams(max_tokens=3, ignore_eos=True))
    for _ in range(400):
        if engine.requests[canary].is_finished:
            break
        engine.step()  # raised IndexError on every step once the int16 sum had wrapped
    assert engine.output(canary).finish_reason == "length"


def test_a_generator_of_stop_ids_is_kept():
    params = SamplingParams(stop_token_ids=(t for t in [4, 9]))
    assert params.stop_token_ids == (4, 9)
