"""Bounds on what one request may make the server read and tokenize.

A 10 MB prompt once took 14-16 s to refuse and stalled every other stream meanwhile: the
body was read whole, parsed and tokenized on the event loop before its length was checked.
Now a body past ``max_request_bytes`` is refused with 413 as soon as its Content-Length (or
its bytes so far) say so; text that cannot fit ``max_model_len`` is refused before it is
tokenized (no token is longer than the vocabulary's longest, so the byte count bounds the
token count from below); and long text is tokenized on a worker thread
(``encode_batch`` releases Python's lock while it runs), so the loop keeps streaming. A body
that has not all come within BODY_TIMEOUT_S gets 408 (app.parse), so one trickled in never
holds a handler forever.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import TYPE_CHECKING

from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api.protocol import error_body

if TYPE_CHECKING:  # the serve extra's; this module's constants are read without it (state.py)
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_REQUEST_BYTES = 4 * 2**20  # a 128k-token prompt as JSON fits; 10 MB does not
OFFLOAD_CHARS = 8192  # text longer than this is tokenized off the event loop
BODY_TIMEOUT_S = 60.0  # a body not all in by then gets 408 (4 MiB at 0.5 Mbit/s fits)


class BodyTooLarge(Exception):
    """The body grew past the limit while it was read (no Content-Length said so)."""


class BodyLimit:
    """ASGI middleware: 413 for a body longer than ``max_bytes``, before it is read."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_request_bytes must be >= 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self.refuse(send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise BodyTooLarge(self.message)
            return message

        await self.app(scope, counted, send)

    @property
    def message(self) -> str:
        return f"the request body is over the server's limit of {self.max_bytes} bytes"

    async def refuse(self, send: Send) -> None:
        # The protocol ends the connection after it (http_limits.py): a FIN now, the rest
        # of the body discarded briefly, then the close (a close at once would reset it
        # under a client still sending, which then might never read the 413).
        body = json.dumps(error_body(self.message, 413)).encode()
        headers = [(b"content-type", b"application/json")]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def max_token_bytes(tokenizer: Tokenizer) -> int:
    """The most UTF-8 bytes one token's vocabulary entry takes (added tokens included): an
    upper bound on the text one token covers (byte-level and SentencePiece markers take
    more bytes in the vocabulary than in the text, so the bound only gets looser)."""
    vocab = tokenizer.tokenizer.get_vocab(with_added_tokens=True)
    return max((len(token.encode()) for token in vocab), default=1)


def cannot_fit(text: str, bytes_per_token: int, max_model_len: int) -> str | None:
    """Why ``text`` cannot fit ``max_model_len`` whatever it tokenizes to, or None; cheap
    (a length, then a byte count only for text long enough to matter)."""
    if len(text) <= max_model_len:  # a token covers at least one character
        return None
    num_bytes = len(text.encode())
    least = math.ceil(num_bytes / bytes_per_token)
    if least < max_model_len:
        return None
    return (
        f"the prompt is {num_bytes} bytes: at least {least} tokens, which cannot fit "
        f"max_model_len={max_model_len} with room for output"
    )


async def encode(tokenizer: Tokenizer, text: str, add_bos: bool = True) -> list[int]:
    """``tokenizer.encode``; on a worker thread for long text (the loop keeps serving)."""
    if len(text) <= OFFLOAD_CHARS:
        return tokenizer.encode(text, add_bos=add_bos)
    # encode_batch runs without Python's lock (tokenizers' allow_threads); encode holds it.
    (ids,) = await asyncio.to_thread(tokenizer.encode_batch, [text])
    if add_bos and tokenizer.bos_id is not None:
        return [tokenizer.bos_id, *ids]
    return ids
