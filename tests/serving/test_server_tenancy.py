"""API keys as tenants: each key's requests land in its tenant's accounting, a tenant over
its rate limit gets 429 with Retry-After, and prefix-cache blocks are never shared across
tenants (a request's cache_salt separates further)."""

from __future__ import annotations

import re
import time

import pytest
from server_helpers import MODEL, shared_server

# Long enough for several full 16-token pages, so a prefix-cache hit is possible.
SHARED_PREFIX = "import os\nimport sys\n\n\ndef main(argv):\n    parser = make_parser()\n" * 2


@pytest.fixture(scope="module")
def server():
    return shared_server()


def metric(server, name: str, tenant: str) -> float:
    with server.http() as http:
        text = http.get("/metrics").text
    found = re.search(rf'^{re.escape(name)}{{tenant="{tenant}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def complete(server, tenant: str, prompt: str = "x = 1\n", **extra):
    return server.client(tenant).completions.create(
        model=MODEL, prompt=prompt, max_tokens=4, temperature=0, extra_body=extra or None
    )


def test_each_key_lands_in_its_tenants_accounting(server):
    before = server.call("requests_per_tenant")
    generated = {t: metric(server, "vllm:generation_tokens_total", t) for t in ("alice", "bob")}
    prompt_tokens = metric(server, "vllm:prompt_tokens_total", "bob")
    usage = {"alice": 0, "bob": 0}
    bob_prompt = 0
    for tenant in ("alice", "bob", "bob", "alice", "bob"):
        result = complete(server, tenant)
        usage[tenant] += result.usage.completion_tokens
        if tenant == "bob":
            bob_prompt += result.usage.prompt_tokens
    after = server.call("requests_per_tenant")
    assert after.get("alice", 0) - before.get("alice", 0) == 2
    assert after.get("bob", 0) - before.get("bob", 0) == 3
    for tenant in ("alice", "bob"):
        gained = metric(server, "vllm:generation_tokens_total", tenant) - generated[tenant]
        assert gained == usage[tenant]
    assert metric(server, "vllm:prompt_tokens_total", "bob") - prompt_tokens == bob_prompt
    # The engine was configured with the file's tenants (alice's weight 2).
    weights = server.call("tenant_weights")
    assert weights == {"alice": 2.0, "bob": 1.0, "tight": 1.0}


@pytest.mark.slow
def test_over_the_rate_limit_is_429_with_retry_after(server):
    body = {"model": MODEL, "prompt": "x", "max_tokens": 30}
    # tight's bucket holds 40 tokens and refills at 1/s: one request of ~32 fits, the next
    # does not for several seconds.
    with server.http("tight") as http:
        first = http.post("/v1/completions", json=body)
        if first.status_code == 429:  # an earlier test's request still drains the bucket
            time.sleep(int(first.headers["retry-after"]))  # the wait until the bucket holds it
            first = http.post("/v1/completions", json=body)
        second = http.post("/v1/completions", json=body)
    assert first.status_code == 200, first.text
    assert second.status_code == 429
    # The bucket refills 1 token/s and the first request left it ~30 tokens short.
    assert int(second.headers["retry-after"]) >= 20
    error = second.json()["error"]
    assert error["type"] == "rate_limit_error" and "token_rate" in error["message"]
    with server.http("alice") as http:  # other tenants are not limited by tight's bucket
        assert http.post("/v1/completions", json=body).status_code == 200


@pytest.mark.slow
def test_prefix_cache_is_salted_per_tenant_and_by_cache_salt(server):
    complete(server, "alice", SHARED_PREFIX + "a")
    complete(server, "alice", SHARED_PREFIX + "b")
    assert server.call("newest_request").prefix_hit_tokens >= 32  # alice reuses her own prefix
    complete(server, "bob", SHARED_PREFIX + "c")
    assert server.call("newest_request").prefix_hit_tokens == 0  # bob never sees alice's blocks
    complete(server, "alice", SHARED_PREFIX + "d", cache_salt="private")
    assert server.call("newest_request").prefix_hit_tokens == 0  # a new salt starts cold
    complete(server, "alice", SHARED_PREFIX + "e", cache_salt="private")
    assert server.call("newest_request").prefix_hit_tokens >= 32
