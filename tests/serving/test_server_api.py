"""The OpenAI API over a real server, through the official openai client: completions and
chat, streamed and not, usage, stop strings, logprobs, and one clear 4xx per bad input."""

from __future__ import annotations

import json

import openai
import pytest
from server_helpers import MAX_MODEL_LEN, MODEL, shared_server

from claimbench.serving.api.protocol import ChatMessage

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def server():
    return shared_server()


def greedy(client: openai.OpenAI, prompt: str = PROMPT, **kwargs):
    return client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
        **kwargs,
    )


@pytest.mark.slow
def test_completion_usage_counts_the_tokens(server):
    result = greedy(server.client(), logprobs=0)
    tokenizer = server.state.tokenizer
    choice = result.choices[0]
    assert result.usage.prompt_tokens == len(tokenizer.encode(PROMPT))
    # ignore_eos: exactly max_tokens come out, and each has its log-prob and token text.
    assert result.usage.completion_tokens == 12 == len(choice.logprobs.token_logprobs)
    assert result.usage.total_tokens == result.usage.prompt_tokens + 12
    assert choice.finish_reason == "length"
    assert "".join(choice.logprobs.tokens) == choice.text
    assert all(lp <= 0 for lp in choice.logprobs.token_logprobs)
    assert result.model == MODEL and result.object == "text_completion"


@pytest.mark.slow
def test_streamed_completion_equals_the_whole_one(server):
    client = server.client()
    whole = greedy(client).choices[0].text
    chunks = list(greedy(client, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert all(c.usage is None for c in chunks[:-1])


@pytest.mark.slow
def test_stop_string_cuts_the_text_streamed_and_not(server):
    client = server.client()
    whole = greedy(client).choices[0].text
    stop = whole[4:7]
    assert stop.strip(), f"need a visible stop string in {whole!r}"
    expected = whole[: whole.index(stop)]
    result = greedy(client, stop=[stop, "never-appears"])
    assert result.choices[0].text == expected
    assert result.choices[0].finish_reason == "stop"
    streamed = list(greedy(client, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == expected
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_chat_streamed_and_not(server):
    client = server.client()
    messages = [
        {"role": "system", "content": "You write Python."},
        {"role": "user", "content": "A function that adds two numbers."},
    ]
    kwargs = dict(model=MODEL, messages=messages, max_tokens=10, temperature=0)
    result = client.chat.completions.create(**kwargs, logprobs=True)
    message = result.choices[0].message
    assert message.role == "assistant" and message.content
    assert result.usage.completion_tokens == len(result.choices[0].logprobs.content)
    prompt = server.state.chat_template.render([ChatMessage.model_validate(m) for m in messages])
    assert prompt.endswith("<|assistant|>\n")  # the documented default template
    assert result.usage.prompt_tokens == len(server.state.tokenizer.encode(prompt))
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == message.content
    assert chunks[-1].choices[0].finish_reason == result.choices[0].finish_reason


def test_raw_stream_is_sse_ending_in_done(server):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 5, "stream": True}
    with server.http() as http, http.stream("POST", "/v1/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[0][6:])["object"] == "text_completion"


def test_models_lists_the_served_model(server):
    models = server.client().models.list().data
    assert [m.id for m in models] == [MODEL]


def test_wrong_or_missing_key_is_401_in_openai_json(server):
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="cb-not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.completions.create(model=MODEL, prompt="x", max_tokens=1)
    assert e.value.status_code == 401
    assert e.value.body["message"] == "invalid API key"
    with server.http(tenant=None) as http:
        response = http.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


BAD_REQUESTS = [
    ("{not json", 400, "not valid JSON"),
    ("[1, 2]", 400, "JSON object"),
    ({"model": "gpt-4", "prompt": "x"}, 404, "'gpt-4' does not exist"),
    ({"model": MODEL, "prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 2.5}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ({"model": MODEL, "prompt": "x", "top_p": 0}, 400, "top_p"),
    ({"model": MODEL, "prompt": "x", "seed": -3}, 400, "seed"),
    ({"model": MODEL, "prompt": "x", "n": 2}, 400, "n=2"),
    ({"model": MODEL, "prompt": "x", "logprobs": 3}, 400, "logprobs=3"),
    ({"model": MODEL, "prompt": "x", "max_tokn": 3}, 400, "max_tokn"),
    ({"model": MODEL, "prompt": [1, 99999]}, 400, "outside the vocabulary"),
    ({"model": MODEL, "prompt": ["a", "b"]}, 400, "one prompt per request"),
    ({"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream"),
    ({"model": MODEL, "prompt": "x " * 200}, 400, f"max_model_len={MAX_MODEL_LEN}"),
    ({"model": MODEL, "prompt": "x", "max_tokens": MAX_MODEL_LEN}, 400, "exceeds max_model_len"),
]


@pytest.mark.parametrize(("body", "status", "words"), BAD_REQUESTS)
def test_bad_completion_requests_get_one_clear_4xx(server, body, status, words):
    content = body if isinstance(body, str) else json.dumps(body)
    with server.http() as http:
        response = http.post("/v1/completions", content=content)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error["message"]
    assert "Traceback" not in response.text and "\n" not in error["message"]


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        ([], "messages"),
        ([{"role": "wizard", "content": "x"}], "role"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}], "content"),
        ([{"role": "user"}] * 1, None),
    ],
)
def test_bad_chat_messages(server, messages, words):
    body = {"model": MODEL, "messages": messages, "max_tokens": 2}
    with server.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    if words is None:  # a message without content is an empty turn, not an error
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 400
    assert words in response.json()["error"]["message"]
