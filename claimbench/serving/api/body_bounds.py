"""Bounds on the work one request body can cause, checked before that work runs.

A chat body under the byte limit made of about 141,000 empty messages took 0.9 s to
validate and render, and pydantic's validator holds Python's lock throughout, so even on a
worker thread it stalled every other tenant's stream for as long. What a body costs to
validate grows with its JSON objects and arrays, not its bytes; so before pydantic sees a
body, its objects and arrays outside strings are counted with byte scans (C speed, and
a body dense with them is refused after its first 64 KiB) and a body with more than
MAX_JSON_CONTAINERS is refused with 413. Long lists of plain values cost pydantic as much
(a prompt of 2.1 million token ids, 1.4 million stop strings, an ignored field of a chat
message holding 1.4 million items: each validated whole, 0.3 to 3 s), so the values are
bounded too: every object, array, item and key outside strings (its ``{``, ``[``, ``,``
and ``:``) counts, and a body with more than ``max_json_values`` (what the largest valid
request of its endpoint holds: a prompt of ``max_model_len`` token ids, or a chat at its
limits) is refused with 413 before validation. A chat may then carry at most MAX_MESSAGES
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
# What the largest valid request holds, in JSON values (max_json_values): a chat message
# with a parts list and a few keys clients send back (refusal, tool_calls, ...), a
# content part, and the top-level fields (at most 4 stop strings, 64 stop token ids).
VALUES_PER_MESSAGE = 24
VALUES_PER_PART = 6
FIELD_VALUES = 256
OFFLOAD_BYTES = 8192  # a body longer than this is decoded on a worker thread
SCAN_SLICE_BYTES = 1 << 16  # counted a slice at a time (count_containers)

Body = TypeVar("Body", bound=BaseModel)


class TooManyContainers(ValueError):
    """The body has more JSON objects, arrays or values than any request the server accepts."""


def max_json_values(max_model_len: int, chat: bool) -> int:
    """The JSON values (count_values) the largest valid body of an endpoint holds: a chat
    at MAX_MESSAGES and MAX_CONTENT_PARTS, or a completion whose prompt is ``max_model_len``
    token ids; plus the other fields."""
    if max_model_len < 1:
        raise ValueError(f"max_model_len must be >= 1, got {max_model_len}")
    if chat:
        return (
            VALUES_PER_MESSAGE * MAX_MESSAGES + VALUES_PER_PART * MAX_CONTENT_PARTS + FIELD_VALUES
        )
    return max_model_len + FIELD_VALUES


def count_containers(raw: bytes, stop_above: int) -> int:
    """The JSON objects and arrays opened in ``raw`` outside its strings (an upper bound
    for a body that is not valid JSON), counted only until there are more than
    ``stop_above``. Escaped quotes and backslashes are blanked first (same length), so every
    quote left opens or closes a string, and the pieces between quotes alternate between
    outside and inside strings. Scanned a slice at a time: a body dense with objects is
    refused after its first slices, and a long one yields Python's lock between slices."""
    return _count_outside_strings(raw, (b"{", b"["), stop_above)


def count_values(raw: bytes, stop_above: int) -> int:
    """The JSON values and keys in ``raw`` beyond the first, as its ``{``, ``[``, ``,`` and
    ``:`` outside strings (each object, array, next item or key), counted as
    count_containers counts, only until there are more than ``stop_above``."""
    return _count_outside_strings(raw, (b"{", b"[", b",", b":"), stop_above)


def _count_outside_strings(raw: bytes, marks: tuple[bytes, ...], stop_above: int) -> int:
    num_total = sum(raw.count(mark) for mark in marks)
    if num_total <= stop_above:  # the usual case: not even counting those inside strings
        return num_total
    plain = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    num_found, inside = 0, False
    for start in range(0, len(plain), SCAN_SLICE_BYTES):
        pieces = plain[start : start + SCAN_SLICE_BYTES].split(b'"')
        outside = b"".join(pieces[1::2] if inside else pieces[::2])
        num_found += sum(outside.count(mark) for mark in marks)
        if num_found > stop_above:
            break
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes in the slice
    return num_found


def decode_body(raw: bytes, schema: type[Body], max_values: int) -> Body:
    """``schema`` validated from the JSON ``raw``: TooManyContainers before validating a
    body past MAX_JSON_CONTAINERS or ``max_values`` (max_json_values), pydantic's
    ValidationError for a bad one."""
    if count_containers(raw, MAX_JSON_CONTAINERS) > MAX_JSON_CONTAINERS:
        raise TooManyContainers(
            f"the request body has over {MAX_JSON_CONTAINERS} JSON objects and arrays, more "
            f"than any request accepted holds (a chat has at most {MAX_MESSAGES} messages and "
            f"{MAX_CONTENT_PARTS} content parts)"
        )
    if count_values(raw, max_values) > max_values:
        raise TooManyContainers(
            f"the request body has over {max_values} JSON values (objects, arrays, items and "
            f"keys), more than any request accepted here holds (a prompt has at most "
            f"max_model_len token ids, a chat at most {MAX_MESSAGES} messages and "
            f"{MAX_CONTENT_PARTS} content parts)"
        )
    return schema.model_validate_json(raw)
