"""Bounds on the work one request body can cause, checked before that work runs.

A chat body under the byte limit made of about 141,000 empty messages took 0.9 s to
validate and render, and pydantic's validator holds Python's lock throughout, so even on a
worker thread it stalled every other tenant's stream for as long. What a body costs to
validate grows with its JSON objects and arrays, not its bytes; so before pydantic sees a
body, its objects and arrays outside strings are counted with byte scans (C speed, and
a body dense with them is refused after its first 64 KiB) and a body with more than
MAX_JSON_CONTAINERS is refused with 413. A chat may then carry at most MAX_MESSAGES
messages (OpenAI's own limit) and MAX_CONTENT_PARTS content parts in all, and its template
may write at most as many characters as could ever fit the model's context
(``ChatTemplate.render``'s ``max_chars``).

Bodies over OFFLOAD_BYTES are decoded on a worker thread, and chat templates are always
rendered (and their text tokenized) on one, so what is left on the event loop per request
is bounded and small.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

MAX_MESSAGES = 2048  # OpenAI's limit on a chat's messages
MAX_CONTENT_PARTS = 2048  # text parts over all of a chat's messages
# A chat at both limits, every message with a parts list (an object and an array each),
# plus the few other objects and arrays a request has (stop, stream_options, ...).
MAX_JSON_CONTAINERS = 2 * MAX_MESSAGES + MAX_CONTENT_PARTS + 64
OFFLOAD_BYTES = 8192  # a body longer than this is decoded on a worker thread
SCAN_SLICE_BYTES = 1 << 16  # counted a slice at a time (count_containers)

Body = TypeVar("Body", bound=BaseModel)


class TooManyContainers(ValueError):
    """The body has more JSON objects and arrays than any request the server accepts."""


def count_containers(raw: bytes, stop_above: int) -> int:
    """The JSON objects and arrays opened in ``raw`` outside its strings (an upper bound
    for a body that is not valid JSON), counted only until there are more than
    ``stop_above``. Escaped quotes and backslashes are blanked first (same length), so every
    quote left opens or closes a string, and the pieces between quotes alternate between
    outside and inside strings. Scanned a slice at a time: a body dense with objects is
    refused after its first slices, and a long one yields Python's lock between slices."""
    num_total = raw.count(b"{") + raw.count(b"[")
    if num_total <= stop_above:  # the usual case: not even counting those inside strings
        return num_total
    plain = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    num_found, inside = 0, False
    for start in range(0, len(plain), SCAN_SLICE_BYTES):
        pieces = plain[start : start + SCAN_SLICE_BYTES].split(b'"')
        outside = b"".join(pieces[1::2] if inside else pieces[::2])
        num_found += outside.count(b"{") + outside.count(b"[")
        if num_found > stop_above:
            break
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes in the slice
    return num_found


def decode_body(raw: bytes, schema: type[Body]) -> Body:
    """``schema`` validated from the JSON ``raw``: TooManyContainers before validating a
    body past MAX_JSON_CONTAINERS, pydantic's ValidationError for a bad one."""
    if count_containers(raw, MAX_JSON_CONTAINERS) > MAX_JSON_CONTAINERS:
        raise TooManyContainers(
            f"the request body has over {MAX_JSON_CONTAINERS} JSON objects and arrays, more "
            f"than any request accepted holds (a chat has at most {MAX_MESSAGES} messages and "
            f"{MAX_CONTENT_PARTS} content parts)"
        )
    return schema.model_validate_json(raw)
