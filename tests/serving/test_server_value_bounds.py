"""Long JSON lists of plain values are refused before pydantic validates them: every item
and key outside strings counts toward a bound taken from the largest valid request (a
prompt of max_model_len token ids, a chat at its limits), whatever field carries them."""

from __future__ import annotations

import json

import pytest
from hardening_helpers import MODEL, completion, in_process_server

from claimbench.serving.api import body_bounds
from claimbench.serving.api.body_bounds import count_values, max_json_values
from claimbench.serving.api.protocol import ChatCompletionRequest, CompletionRequest


@pytest.fixture(scope="module")
def server():
    return in_process_server()


@pytest.fixture
def validated(monkeypatch):
    """The bodies pydantic was asked to validate, by endpoint schema."""
    seen: list[type] = []
    for schema in (CompletionRequest, ChatCompletionRequest):
        original = schema.model_validate_json

        def recorded(raw, *args, _schema=schema, _original=original, **kwargs):
            seen.append(_schema)
            return _original(raw, *args, **kwargs)

        monkeypatch.setattr(schema, "model_validate_json", recorded)
    return seen


def post(server, path: str, body: dict) -> tuple[int, dict]:
    async def send():
        async with server.client() as client:
            return await client.post(path, content=json.dumps(body).encode())

    response = server.run(send())
    return response.status_code, response.json()


def test_values_are_counted_outside_strings_only():
    # Items and keys: 2 objects, 1 array, 3 colons, 3 commas; none of those in the strings.
    raw = b'{"a": "x,:{[", "b": [1, 2, {"c": "\\",:"}]}'
    assert count_values(raw, 0) == 9
    text = ",:" * (2 * body_bounds.SCAN_SLICE_BYTES)  # a string spanning slices
    assert count_values(json.dumps({"p": text, "q": [1, 2]}).encode(), 10) == 6


def hostile_completions(limit: int) -> dict[str, dict]:
    n = limit + 1
    return {
        "prompt of empty strings": completion(prompt=[""] * n),
        "prompt of token ids": completion(prompt=[1] * n),
        "stop strings": completion(stop=["a"] * n),
        "stop token ids": completion(stop_token_ids=[1] * n),
        "logit_bias keys": completion(logit_bias={str(i): 0.0 for i in range(n)}),
    }


def test_long_value_lists_are_refused_before_validation(server, validated):
    limit = max_json_values(server.state.max_model_len, chat=False)
    for kind, body in hostile_completions(limit).items():
        status, answer = post(server, "/v1/completions", body)
        assert status == 413, kind
        assert "JSON values" in answer["error"]["message"], kind
    chat_limit = max_json_values(server.state.max_model_len, chat=True)
    message = {"role": "user", "content": "x", "ignored": list(range(chat_limit))}
    chat = {"model": MODEL, "messages": [message], "max_tokens": 2}
    status, _ = post(server, "/v1/chat/completions", chat)
    assert status == 413
    assert validated == []  # pydantic saw none of them


def test_the_largest_valid_prompt_is_still_validated(server, validated):
    max_model_len = server.state.max_model_len
    status, answer = post(server, "/v1/completions", completion(prompt=[1] * max_model_len))
    assert validated == [CompletionRequest]
    assert status == 400 and "JSON values" not in answer["error"]["message"]  # too long to run


def test_the_bound_follows_the_model_length():
    assert max_json_values(4096, chat=False) > 4096
    assert max_json_values(8192, chat=False) == max_json_values(4096, chat=False) + 4096
    with pytest.raises(ValueError, match="got 0"):
        max_json_values(0, chat=False)
