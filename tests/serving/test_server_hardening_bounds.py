"""Integers that reach a device array are bounded where they enter, and a request whose
values still cannot be put in a step fails alone: ``{"top_k": 2147483648}`` once overflowed
the step's int32 array and ended the engine for every tenant."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from engine_helpers import shared_tiny_engine, tiny_engine

from claimbench.engine.outputs import FinishEvent, TokenEvent
from claimbench.engine.sampling_params import INT32_MAX, SamplingParams
from claimbench.engine.worker.batch import StepInputError, build_step
from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api.generation import OutputAssembler, pieces
from claimbench.serving.api.protocol import ChatCompletionRequest, CompletionRequest
from claimbench.serving.engine_loop.protocol import RequestFailed
from claimbench.serving.engine_loop.request_stream import RequestStream

BASE = '{"model": "m", "prompt": "x"'


@pytest.mark.parametrize(
    "kwargs",
    [
        {"top_k": 2**31},
        {"max_tokens": 2**31},
        {"stop_token_ids": (2**31,)},
        {"stop_token_ids": (-1,)},
        {"seed": 2**32},
    ],
)
def test_sampling_params_refuse_what_the_step_arrays_cannot_hold(kwargs):
    with pytest.raises(ValueError, match="must be in"):
        SamplingParams(**kwargs)


def test_top_k_up_to_int32_is_accepted_and_means_every_token_past_the_vocab():
    assert SamplingParams(top_k=INT32_MAX).top_k == INT32_MAX


@pytest.mark.parametrize(
    "fields",
    [
        '"priority": 2147483648',
        '"stop_token_ids": [2147483648]',
        '"max_tokens": 2147483648',
        '"seed": 4294967296',
        '"prompt": [2147483648]',
    ],
)
def test_the_protocol_bounds_every_integer(fields):
    body = f'{{"model": "m", {fields}}}' if '"prompt"' in fields else f"{BASE}, {fields}}}"
    try:
        request = CompletionRequest.model_validate_json(body)
    except ValueError:
        return  # refused by the schema: a 400 naming the field
    assert request.unsupported() is not None  # or by unsupported(): a 400 too


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ('"stop": ["a", "b", "c", "d", "e"]', "at most 4 stop strings"),
        ('"stop": "' + "x" * 257 + '"', "at most 256 characters"),
        ('"stop_token_ids": ' + str(list(range(65))), "at most 64"),
    ],
)
def test_stop_strings_and_ids_are_few_and_short(fields, message):
    request = CompletionRequest.model_validate_json(f"{BASE}, {fields}}}")
    assert message in request.unsupported()


def test_chat_top_logprobs_is_bounded_as_openai_bounds_it():
    with pytest.raises(ValueError, match="less than or equal to 20"):
        ChatCompletionRequest.model_validate_json(
            '{"model": "m", "messages": [{"role": "user", "content": "x"}], '
            '"logprobs": true, "top_logprobs": 21}'
        )


def _smuggled(top_k: int) -> SamplingParams:
    """Params past validation (as a caller building them around it would)."""
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    object.__setattr__(params, "top_k", top_k)
    return params


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_request_the_step_cannot_hold_fails_alone(async_scheduling):
    engine = tiny_engine(async_scheduling=async_scheduling)
    good = engine.add_request([3, 4, 5], SamplingParams(max_tokens=4, ignore_eos=True))
    bad = engine.add_request([3, 4, 6], _smuggled(2**31))
    events = []
    while engine.has_unfinished:
        events.extend(engine.step())
    finishes = {e.request_id: e.reason for e in events if isinstance(e, FinishEvent)}
    assert finishes == {bad: "error", good: "length"}
    assert sum(isinstance(e, TokenEvent) and e.request_id == good for e in events) == 4
    assert engine.stats().num_used_pages == 0  # the failed request's pages are freed too
    after = engine.add_request([3, 4, 5], SamplingParams(max_tokens=2, ignore_eos=True))
    while engine.has_unfinished:
        engine.step()
    assert engine.requests[after].finish_reason == "length"


def test_build_step_names_the_request_that_overflows():
    engine = shared_tiny_engine()
    engine.add_request([3, 4, 5], _smuggled(2**40))
    scheduled = engine.scheduler.schedule(0.0).scheduled
    with pytest.raises(StepInputError) as info:
        build_step(engine.config, scheduled)
    assert info.value.request_ids == [scheduled[0][0].request_id]


def test_an_error_finish_reaches_the_client_as_an_error_not_a_finish():
    tokenizer = Tokenizer.from_dir(default_model_path())
    stream = RequestStream("req-1")
    stream.push([TokenEvent("req-1", 300, 0, 0.0, None), FinishEvent("req-1", "error", 0.1)])
    engine = SimpleNamespace(abort=lambda *args: None)

    async def drain() -> list:
        return [p async for p in pieces(engine, stream, OutputAssembler(tokenizer, []))]

    with pytest.raises(RequestFailed, match="could not run this request's values"):
        asyncio.run(drain())
