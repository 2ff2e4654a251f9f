"""One tenant's body cannot stall the others: a body with more JSON objects than any request
holds is refused before pydantic sees it, a chat's messages and content parts are bounded
before its template renders, the template stops at what the context could hold, and
decoding, rendering and tokenizing run on worker threads, never on the event loop."""

from __future__ import annotations

import json
import threading

import pytest
from hardening_helpers import MODEL, completion, in_process_server

from claimbench.serving.api import body_bounds
from claimbench.serving.api.body_bounds import (
    MAX_CONTENT_PARTS,
    MAX_JSON_CONTAINERS,
    MAX_MESSAGES,
    OFFLOAD_BYTES,
    count_containers,
)
from claimbench.serving.api.chat import ChatTemplate


@pytest.fixture(scope="module")
def server():
    return in_process_server()


@pytest.fixture
def calls(monkeypatch):
    """The thread each body decode and chat render ran on, in order."""
    seen: dict[str, list[threading.Thread]] = {"decode": [], "render": []}
    decode, render = body_bounds.decode_body, ChatTemplate.render

    def recorded_decode(*args, **kwargs):
        seen["decode"].append(threading.current_thread())
        return decode(*args, **kwargs)

    def recorded_render(*args, **kwargs):
        seen["render"].append(threading.current_thread())
        return render(*args, **kwargs)

    monkeypatch.setattr(body_bounds, "decode_body", recorded_decode)
    monkeypatch.setattr(ChatTemplate, "render", recorded_render)
    return seen


def post(server, path: str, body: dict | bytes) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def send():
        async with server.client() as client:
            headers = {"content-type": "application/json"}
            return await client.post(path, content=raw, headers=headers)

    response = server.run(send())
    return response.status_code, response.json()


def chat(messages: list[dict], **fields) -> dict:
    return {"model": MODEL, "messages": messages, "max_tokens": 2, **fields}


def test_containers_are_counted_outside_strings_only():
    # Braces and brackets inside strings, escaped quotes and escaped backslashes: 3 real.
    assert count_containers(b'{"a": "{[\\"{", "b": [1, {}]}', 0) == 3
    assert count_containers(b'{"a": "x\\\\", "b": ["{"]}', 0) == 2
    # A string spanning slices: the braces in it still do not count.
    text = "{" * (3 * body_bounds.SCAN_SLICE_BYTES)
    assert count_containers(json.dumps({"p": text, "q": [[]]}).encode(), 1) == 3


def test_a_body_of_many_empty_messages_is_refused_before_it_is_validated(server, calls):
    hostile = chat([{"role": "user", "content": ""}] * (4 * MAX_JSON_CONTAINERS))
    status, body = post(server, "/v1/chat/completions", hostile)
    assert status == 413 and "JSON objects and arrays" in body["error"]["message"]
    assert calls["render"] == []
    # The same shape as a completion body (a prompt of many one-token lists): refused too.
    status, _ = post(server, "/v1/completions", completion(prompt=[[1]] * MAX_JSON_CONTAINERS))
    assert status == 413


def test_too_many_messages_or_parts_are_refused_before_rendering(server, calls):
    message = {"role": "user", "content": "x"}
    status, body = post(server, "/v1/chat/completions", chat([message] * (MAX_MESSAGES + 1)))
    assert status == 400 and body["error"]["param"] == "messages"
    parts = [{"type": "text", "text": "x"}] * (MAX_CONTENT_PARTS // 2 + 1)
    two = [{"role": "user", "content": parts}] * 2
    status, body = post(server, "/v1/chat/completions", chat(two))
    assert status == 400 and "content parts" in body["error"]["message"]
    assert calls["render"] == []
    # At the limits, it renders (and is then refused for its length, not its count).
    status, _ = post(server, "/v1/chat/completions", chat([message] * MAX_MESSAGES))
    assert len(calls["render"]) == 1 and status == 400


def test_a_template_stops_at_what_the_context_could_hold():
    # 10^10 characters if it ran to its end (the sandbox caps each range at 10^5).
    looping = ChatTemplate(
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
    )
    with pytest.raises(ValueError, match="over 1000 characters"):
        looping.render([], max_chars=1000)
    assert ChatTemplate("{{ 'x' * 5 }}").render([], max_chars=5) == "xxxxx"


def test_decoding_rendering_and_tokenizing_run_off_the_event_loop(server, calls, monkeypatch):
    tokenizer = server.state.tokenizer
    encoded: list[threading.Thread] = []
    encode_batch = tokenizer.encode_batch

    def recorded_encode_batch(texts):
        encoded.append(threading.current_thread())
        return encode_batch(texts)

    monkeypatch.setattr(tokenizer, "encode_batch", recorded_encode_batch)
    loop_thread = threading.current_thread()  # in_process_server runs its loop on this one
    padding = "x" * OFFLOAD_BYTES  # over the offload size as a body, one word as a prompt
    status, _ = post(server, "/v1/chat/completions", chat([{"role": "user", "content": "hi"}]))
    assert status == 200
    status, _ = post(server, "/v1/completions", completion(user=padding))
    assert status == 200
    hello = chat([{"role": "user", "content": "hi"}], user=padding)
    status, _ = post(server, "/v1/chat/completions", hello)
    assert status == 200
    assert len(calls["render"]) == 2 and loop_thread not in calls["render"]
    assert len(encoded) == 2 and loop_thread not in encoded
    # Small bodies are decoded in place (microseconds); large ones on a worker thread.
    assert calls["decode"][0] is loop_thread
    assert calls["decode"][1] is not loop_thread and calls["decode"][2] is not loop_thread
