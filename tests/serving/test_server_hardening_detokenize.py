"""Long text is tokenized, and a long batch of output (a whole response read at its end)
detokenized, on a worker thread, to the same ids and text as inline: one long request does
not hold every other stream."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from claimbench.engine.outputs import FinishEvent, TokenEvent
from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api import generation, limits
from claimbench.serving.api.generation import OFFLOAD_EVENTS, OutputAssembler, pieces
from claimbench.serving.api.limits import OFFLOAD_CHARS
from claimbench.serving.engine_loop.request_stream import RequestStream


@pytest.mark.parametrize("num_tokens", [OFFLOAD_EVENTS // 2, OFFLOAD_EVENTS * 2])
def test_long_batches_are_detokenized_off_the_loop_to_the_same_text(monkeypatch, num_tokens):
    tokenizer = Tokenizer.from_dir(default_model_path())
    ids = tokenizer.encode("def parse(text):\n    return [line.split() for line in text]\n" * 40)
    ids = ids[1 : num_tokens + 1]
    offloaded = []
    to_thread = asyncio.to_thread

    async def recording_to_thread(fn, *args):
        offloaded.append(len(args[1]))
        return await to_thread(fn, *args)

    monkeypatch.setattr(generation.asyncio, "to_thread", recording_to_thread)
    stream = RequestStream("req-1")
    events = [TokenEvent("req-1", t, i, 0.0, None) for i, t in enumerate(ids)]
    stream.push([*events, FinishEvent("req-1", "length", 1.0)])
    engine = SimpleNamespace(abort=lambda *args: None)

    async def drain() -> list:
        return [p async for p in pieces(engine, stream, OutputAssembler(tokenizer, []))]

    (piece,) = asyncio.run(drain())
    assert piece.text == tokenizer.decode(ids) and piece.finish_reason == "length"
    assert offloaded == ([len(ids) + 1] if len(ids) > OFFLOAD_EVENTS else [])


@pytest.mark.slow
@pytest.mark.parametrize("add_bos", [True, False])
def test_long_text_is_tokenized_off_the_loop_to_the_same_ids(monkeypatch, add_bos):
    tokenizer = Tokenizer.from_dir(default_model_path())
    text = "for i in range(10):\n    total += i * i\n" * (OFFLOAD_CHARS // 20)
    assert len(text) > OFFLOAD_CHARS
    offloaded = []
    to_thread = asyncio.to_thread

    async def recording_to_thread(fn, *args):
        offloaded.append(fn)
        return await to_thread(fn, *args)

    monkeypatch.setattr(limits.asyncio, "to_thread", recording_to_thread)
    ids = asyncio.run(limits.encode(tokenizer, text, add_bos))
    assert ids == tokenizer.encode(text, add_bos=add_bos) and len(offloaded) == 1
