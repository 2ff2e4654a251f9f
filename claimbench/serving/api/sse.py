"""Server-sent event encoding for the streamed token chunks, the server's hottest path.

A streamed chunk differs from the previous one of its request only in its text: at 16
streams every engine step writes 16 of them, so building and validating a pydantic model
per chunk (~8 µs each) is replaced by a template made once per request from the model
itself: its JSON with the text cut out, joined around the JSON string of each new text.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

_MARK = "\u0001claimbench-text\u0001"  # never produced by a tokenizer's decode


def event(model: BaseModel) -> str:
    """One SSE event holding ``model`` as JSON."""
    return f"data: {model.model_dump_json()}\n\n"


class TextChunkTemplate:
    """``make(text)``'s SSE event for any text, from one model built with the mark."""

    def __init__(self, chunk_with_mark: BaseModel) -> None:
        dumped = chunk_with_mark.model_dump_json()
        quoted = json.dumps(_MARK, ensure_ascii=False)
        if dumped.count(quoted) != 1:
            raise ValueError("the template chunk must hold the text mark exactly once")
        head, tail = dumped.split(quoted)
        self._head, self._tail = f"data: {head}", f"{tail}\n\n"

    @staticmethod
    def mark() -> str:
        """The text to build the template chunk with."""
        return _MARK

    def event(self, text: str) -> str:
        # ensure_ascii=False: raw UTF-8, as pydantic writes it.
        return self._head + json.dumps(text, ensure_ascii=False) + self._tail
