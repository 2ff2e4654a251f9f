"""The SSE text-chunk template writes what the chunk's pydantic model writes."""

from __future__ import annotations

import pytest

from claimbench.serving.api.protocol import (
    ChatCompletionChunk,
    ChatDelta,
    ChatStreamChoice,
    CompletionChoice,
    CompletionResponse,
)
from claimbench.serving.api.sse import TextChunkTemplate, event

TEXTS = ["hello", " world\n", 'quote " and \\ back', "tab\tnul\x00bell\x07", "é 漢字 🙂", "\u2028"]


def completion(text: str) -> CompletionResponse:
    return CompletionResponse(
        id="cmpl-1", created=7, model="m", choices=[CompletionChoice(text=text, logprobs=None)]
    )


def chat(text: str) -> ChatCompletionChunk:
    choice = ChatStreamChoice(delta=ChatDelta(content=text))
    return ChatCompletionChunk(id="chatcmpl-1", created=7, model="m", choices=[choice])


@pytest.mark.parametrize("build", [completion, chat])
@pytest.mark.parametrize("text", TEXTS)
def test_template_events_are_the_models_bytes(build, text):
    template = TextChunkTemplate(build(TextChunkTemplate.mark()))
    assert template.event(text) == event(build(text))


def test_a_chunk_without_the_mark_is_refused():
    with pytest.raises(ValueError, match="mark exactly once"):
        TextChunkTemplate(completion("no mark"))
