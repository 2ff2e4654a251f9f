"""Generated bad requests (hypothesis): a thousand of them, zero 5xx, the engine never dies,
and a normal request is still answered after every batch.

Fields take values a careless or hostile client sends: integers at and past int32 and
uint32, wrong types, NaN, unknown fields, long lists, other tenants' keys and none, bodies
that are not JSON. Most are refused at validation; the ones that are valid reach the engine
(a few tokens each), so the engine's own boundary is exercised too.
"""

from __future__ import annotations

import json

import pytest
from hardening_helpers import KEYS, MODEL, completion, in_process_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# A thousand a run: drawn afresh each run (no example database), so runs add up; half the
# time of two thousand, which mostly went to drawing bodies and to the engine's steps.
NUM_EXAMPLES = 1000
CHECK_EVERY = 100  # a normal request after each this many generated ones (ten a run)

EDGE_INTS = st.one_of(
    st.integers(-3, 8),
    st.integers(2**31 - 2, 2**31 + 2),
    st.integers(2**32 - 2, 2**32 + 2),
    st.integers(-(2**70), 2**70),
)
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    EDGE_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(EDGE_INTS, max_size=4),
    st.dictionaries(st.text(max_size=4), EDGE_INTS, max_size=2),
)


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Usually a valid value (so some requests get through), sometimes junk."""
    # Not one_of(valid, ..., JUNK): one_of flattens JUNK's branches in, and valid is rare.
    return st.integers(0, 5).flatmap(lambda i: JUNK if i == 0 else valid)


TEXT = st.text(max_size=40)
TOKEN_IDS = st.lists(st.integers(0, 4200), min_size=1, max_size=8)  # a few past the vocab
# Few tokens when valid, so what reaches the engine is quick.
# (not None: a chat request would then run to max_model_len)
MAX_TOKENS = st.integers(0, 5).flatmap(lambda i: EDGE_INTS if i == 0 else st.integers(1, 3))
SAMPLING = {
    "temperature": mostly(st.floats(0, 2)),
    "top_p": mostly(st.floats(0.01, 1)),
    "top_k": st.one_of(st.integers(-1, 5000), EDGE_INTS, JUNK),
    "seed": st.one_of(st.integers(0, 2**32 - 1), EDGE_INTS, JUNK),
    "stop": mostly(st.one_of(TEXT, st.lists(st.text(max_size=300), max_size=6))),
    "stop_token_ids": st.one_of(st.lists(EDGE_INTS, max_size=3), st.lists(EDGE_INTS), JUNK),
    "priority": st.one_of(st.integers(0, 5), EDGE_INTS, JUNK),
    "n": mostly(st.just(1)),
    "stream": mostly(st.booleans()),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.booleans()}), JUNK),
    "ignore_eos": mostly(st.booleans()),
    "cache_salt": mostly(st.text(min_size=1, max_size=8)),
    "presence_penalty": mostly(st.just(0.0)),
    "logit_bias": JUNK,
    "user": mostly(TEXT),
}
MODEL_NAME = mostly(st.just(MODEL))
COMPLETION = st.fixed_dictionaries(
    {
        "model": MODEL_NAME,
        "max_tokens": MAX_TOKENS,
        "prompt": mostly(
            st.one_of(TEXT, TOKEN_IDS, st.lists(TEXT, max_size=2), st.lists(TOKEN_IDS, max_size=2))
        ),
    },
    optional={
        **SAMPLING,
        "logprobs": mostly(st.integers(0, 6)),
        "echo": mostly(st.booleans()),
        "best_of": mostly(st.integers(0, 2)),
        "suffix": mostly(TEXT),
        "no_such_field": JUNK,
    },
)
MESSAGE = st.fixed_dictionaries(
    {"role": mostly(st.sampled_from(["user", "system", "assistant", "tool"]))},
    optional={
        "content": mostly(
            st.one_of(
                TEXT, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}))
            )
        ),
        "name": mostly(TEXT),
    },
)
CHAT = st.fixed_dictionaries(
    {
        "model": MODEL_NAME,
        "max_tokens": MAX_TOKENS,
        "messages": mostly(st.lists(MESSAGE, max_size=3)),
    },
    optional={
        **SAMPLING,
        "logprobs": mostly(st.booleans()),
        "top_logprobs": mostly(st.integers(0, 25)),
        "add_generation_prompt": mostly(st.booleans()),
    },
)
BODY = st.one_of(
    st.tuples(st.just("/v1/completions"), COMPLETION.map(json.dumps)),
    st.tuples(st.just("/v1/completions"), COMPLETION.map(json.dumps)),
    st.tuples(st.just("/v1/chat/completions"), CHAT.map(json.dumps)),
    st.tuples(st.sampled_from(["/v1/completions", "/v1/chat/completions"]), st.binary(max_size=40)),
)
TENANT = st.sampled_from(["alice", "alice", "bob", "bob", "tight", None, "stranger"])


@pytest.fixture(scope="module")
def server():
    return in_process_server()


@pytest.mark.slow  # about 10 s on an idle 2-core host, most of it hypothesis drawing bodies
def test_generated_bad_requests_never_get_a_5xx_nor_end_the_engine(server):
    counts = {"sent": 0, "ok": 0, "refused": 0}

    client = server.client(None)  # one client: a fresh one per request costs milliseconds

    async def send(path: str, body: str | bytes, tenant: str | None) -> tuple[int, bytes]:
        key = KEYS.get(tenant, "cb-not-a-key")
        headers = {} if tenant is None else {"Authorization": f"Bearer {key}"}
        response = await client.post(path, content=body, headers=headers)
        return response.status_code, response.content

    async def normal() -> int:
        async with server.client("bob") as client:
            return (await client.post("/v1/completions", json=completion())).status_code

    @settings(
        max_examples=NUM_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(request=BODY, tenant=TENANT)
    def fuzz(request: tuple[str, str | bytes], tenant: str | None) -> None:
        path, body = request
        # Bad keys lock the client address out (429 for any key afterwards; that lockout has
        # its own tests): forget them, so every generated body is judged on its own.
        server.app.state.failed_auth._failures.clear()
        status, content = server.run(send(path, body, tenant))
        assert status < 500, (status, content[:300], body[:300])
        if status >= 400:
            error = json.loads(content)["error"]  # OpenAI's error object, one message
            assert error["code"] == status and error["message"]
            counts["refused"] += 1
        else:
            counts["ok"] += 1
        assert server.state.engine.is_alive, server.state.engine.error
        counts["sent"] += 1
        if counts["sent"] % CHECK_EVERY == 0:
            assert server.run(normal()) == 200

    fuzz()
    server.run(client.aclose())
    assert counts["sent"] >= NUM_EXAMPLES
    # Both paths were exercised: many requests reached the engine, more were refused.
    assert counts["ok"] > NUM_EXAMPLES // 20 and counts["refused"] > NUM_EXAMPLES // 2, counts
    assert server.run(normal()) == 200
