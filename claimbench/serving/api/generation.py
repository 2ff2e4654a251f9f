"""One request's output as the client sees it: detokenized text, stop strings, log-probs.

Stop strings are matched on the detokenized text, as vLLM does: once the output contains
one, the text is cut just before it and the request is stopped. While streaming, the last
``len(longest stop) - 1`` characters are held back, since they might be the start of a
stop string that the next token completes; a client therefore never sees text that is
later cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from claimbench.engine.outputs import Event, FinishEvent, RejectEvent, TokenEvent
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.engine_loop.engine_client import EngineClient
from claimbench.serving.engine_loop.protocol import RequestFailed
from claimbench.serving.engine_loop.request_stream import RequestStream


@dataclass(frozen=True)
class Piece:
    """What the engine's events since the previous piece add to a response."""

    text: str  # new text safe to send
    token_ids: list[int]  # output tokens since the previous piece
    logprobs: list[float]  # theirs, when asked for
    finish_reason: str | None  # set on the last piece: stop | length | abort


class OutputAssembler:
    """Turns token ids into the text to send, cutting at the first stop string."""

    def __init__(self, tokenizer: Tokenizer, stop: list[str]) -> None:
        self.decoder = tokenizer.stream_decoder()
        self.stop = stop
        self.holdback = max((len(s) for s in stop), default=1) - 1
        self.text = ""  # decoded output, cut at a stop string once one is seen
        self.num_sent_chars = 0
        self.stopped = False  # a stop string ended the output
        self.token_ids: list[int] = []  # every output token pushed
        self.logprobs: list[float] = []  # theirs, when asked for

    def push(self, token_id: int, logprob: float | None = None) -> str:
        """Add one token (and its log-prob, when asked for); the text that may be sent now."""
        self.token_ids.append(token_id)
        if logprob is not None:
            self.logprobs.append(logprob)
        self._extend(self.decoder.push(token_id))
        return self._take(final=self.stopped)

    def finish(self) -> str:
        """Whatever text is still held back."""
        if not self.stopped:
            self._extend(self.decoder.flush())
        return self._take(final=True)

    def _extend(self, piece: str) -> None:
        if not piece or self.stopped:
            return
        # A stop string completed by this piece starts at most holdback chars before it.
        start = max(len(self.text) - self.holdback, 0)
        self.text += piece
        hits = [i for s in self.stop if (i := self.text.find(s, start)) >= 0]
        if hits:
            self.text = self.text[: min(hits)]
            self.stopped = True

    def _take(self, final: bool) -> str:
        end = len(self.text) if final else max(len(self.text) - self.holdback, self.num_sent_chars)
        out = self.text[self.num_sent_chars : end]
        self.num_sent_chars = end
        return out


OFFLOAD_EVENTS = 256  # a batch of more events is detokenized on a worker thread


async def pieces(
    engine: EngineClient, stream: RequestStream, assembler: OutputAssembler
) -> AsyncIterator[Piece]:
    """The request's output piece by piece, ending with one that has a finish_reason. A
    piece covers every event queued when it is made (one token while the consumer keeps up).
    A long batch (a whole response read at its end) is detokenized on a worker thread, so
    one long output does not hold every other stream for its length.

    A stop string aborts the request in the engine (its pages are freed at once). If the
    consumer goes away first (a client disconnect cancels it), the request is aborted.
    RequestFailed when the engine failed the request for its own values."""
    finished = False
    try:
        while True:
            events = await stream.next_batch()
            if len(events) > OFFLOAD_EVENTS:
                piece, cut = await asyncio.to_thread(_assemble, assembler, events)
            else:
                piece, cut = _assemble(assembler, events)
            if piece.finish_reason is not None:
                finished = True
                if cut:
                    engine.abort(stream.request_id, "stop")  # /metrics counts a stop
            yield piece
            if finished:
                return
    finally:
        if not finished:
            engine.abort(stream.request_id)


def _assemble(assembler: OutputAssembler, events: list[Event]) -> tuple[Piece, bool]:
    """The piece ``events`` make, and whether a stop string cut the output (the request is
    then still running in the engine). RequestFailed for an engine's error finish."""
    text, token_ids, logprobs = "", [], []
    for event in events:
        if isinstance(event, TokenEvent):
            text += assembler.push(event.token_id, event.logprob)
            token_ids.append(event.token_id)
            if event.logprob is not None:
                logprobs.append(event.logprob)
            if assembler.stopped:
                return Piece(text + assembler.finish(), token_ids, logprobs, "stop"), True
        elif isinstance(event, FinishEvent) and event.reason == "error":
            raise RequestFailed("the engine could not run this request's values")
        elif isinstance(event, FinishEvent | RejectEvent):
            reason = "abort" if isinstance(event, RejectEvent) else event.reason
            return Piece(text + assembler.finish(), token_ids, logprobs, reason), False
    return Piece(text, token_ids, logprobs, None), False
