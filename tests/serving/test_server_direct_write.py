"""Streamed chunks written from the pipe reader's callback (BodyWriter.write_now through
RequestStream.listener) are the chunks the awaited path writes, on the real server."""

from __future__ import annotations

import json

import pytest
from server_helpers import MODEL, shared_server

from claimbench.serving.api.event_stream import BodyWriter

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def server():
    return shared_server()


@pytest.fixture
def direct_writes(monkeypatch):
    """How many chunks went out through write_now."""
    written = []
    original = BodyWriter.write_now

    def counting(self, events: str) -> bool:
        done = original(self, events)
        written.append(done)
        return done

    monkeypatch.setattr(BodyWriter, "write_now", counting)
    return written


def stream_events(server, path: str, body: dict) -> list[dict | str]:
    with server.http() as http, http.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines]


def completion_body(**extra) -> dict:
    return {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": 16,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    } | extra


def texts(events: list) -> list[str]:
    return [e["choices"][0]["text"] for e in events if isinstance(e, dict) and e["choices"]]


def test_a_stream_goes_out_from_the_callback_and_says_what_the_awaited_path_says(
    server, direct_writes, monkeypatch
):
    direct = stream_events(server, "/v1/completions", completion_body())
    assert sum(direct_writes) >= 8  # most of the 16 tokens' chunks: at once, no task woken
    monkeypatch.setattr(BodyWriter, "can_write_now", lambda self: False)
    before = len(direct_writes)
    awaited = stream_events(server, "/v1/completions", completion_body())
    assert not any(direct_writes[before:])
    assert "".join(texts(direct)) == "".join(texts(awaited))
    assert direct[-1] == awaited[-1] == "[DONE]"
    assert direct[-2]["usage"] == awaited[-2]["usage"]
    assert direct[-2]["usage"]["completion_tokens"] == 16
    finish = [
        e["choices"][0]["finish_reason"] for e in direct if isinstance(e, dict) and e["choices"]
    ]
    assert finish[-1] == "length" and not any(finish[:-1])
    # Every chunk is the same JSON but for its text (and id), whichever path wrote it.
    assert len({blank(e) for e in direct[:-2] + awaited[:-2]}) == 1


def blank(event: dict) -> str:
    choice = event["choices"][0] | {"text": "", "finish_reason": None}
    return json.dumps(event | {"id": "", "choices": [choice]}, sort_keys=True)


def test_chat_streams_from_the_callback_after_its_role_chunk(server, direct_writes):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Add two numbers."}],
        "max_tokens": 12,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    events = stream_events(server, "/v1/chat/completions", body)
    assert sum(direct_writes) >= 6
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[1:-1])
    body["stream"] = False
    with server.http() as http:
        result = http.post("/v1/chat/completions", json=body).json()
    assert content == result["choices"][0]["message"]["content"]


@pytest.mark.slow
def test_stop_strings_and_logprobs_keep_the_awaited_path(server, direct_writes):
    stream_events(server, "/v1/completions", completion_body(stop=["never-appears"]))
    stream_events(server, "/v1/completions", completion_body(logprobs=0))
    assert direct_writes == []  # no listener was set: write_now was never asked
