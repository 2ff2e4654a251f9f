"""Under load and when clients walk away: no request lost or duplicated, every stream ends
in [DONE], and a disconnected client's KV pages are freed at once."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_helpers import MODEL, free_pages, shared_server, wait_for

NUM_REQUESTS = 200
NUM_CLIENTS = 16


@pytest.fixture(scope="module")
def server():
    return shared_server()


@pytest.mark.slow
def test_stream_disconnect_frees_the_pages_at_once(server):
    start = free_pages(server)
    body = {"model": MODEL, "prompt": "class Parser:\n", "max_tokens": 100, "stream": True}
    body["ignore_eos"] = True
    with server.http() as http, http.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")  # generating: the request holds pages now
        assert free_pages(server) < start
    # The client is gone after 1 of 100 tokens; the request must not run on.
    assert wait_for(lambda: free_pages(server) == start, timeout_s=5)
    last = server.call("newest_request")
    assert last.finish_reason == "abort" and last.num_output_tokens < 100


def test_non_streamed_disconnect_aborts_too(server):
    start = free_pages(server)
    body = {"model": MODEL, "prompt": "class Lexer:\n", "max_tokens": 110, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {server.keys['alice']}"}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up after 50 ms
        httpx.post(f"{server.url}/v1/completions", json=body, headers=headers, timeout=0.05)
    assert wait_for(lambda: free_pages(server) == start, timeout_s=5)
    last = server.call("newest_request")
    assert last.finish_reason == "abort" and last.num_output_tokens < 110


def stream_one(server, i: int) -> dict:
    tenant = ("alice", "bob")[i % 2]
    max_tokens = random.Random(i).randint(2, 12)
    body = {
        "model": MODEL,
        "prompt": f"# request {i}\ndef f{i}():\n",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with server.http(tenant) as http, http.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    return {"i": i, "max_tokens": max_tokens, "last": lines[-1], "chunks": chunks}


@pytest.mark.slow
def test_bounded_load_loses_and_duplicates_nothing(server):
    before = server.call("num_requests")
    start = time.monotonic()
    with ThreadPoolExecutor(NUM_CLIENTS) as pool:
        results = list(pool.map(lambda i: stream_one(server, i), range(NUM_REQUESTS)))
    elapsed = time.monotonic() - start
    assert elapsed < 60, f"{NUM_REQUESTS} requests took {elapsed:.1f} s"
    assert sorted(r["i"] for r in results) == list(range(NUM_REQUESTS))
    assert all(r["last"] == "data: [DONE]" for r in results)
    ids = [{c["id"] for c in r["chunks"]} for r in results]
    assert all(len(s) == 1 for s in ids)  # one id per stream
    assert len(set.union(*ids)) == NUM_REQUESTS  # and no two streams share one
    for r in results:
        usage = r["chunks"][-1]["usage"]
        assert usage["completion_tokens"] == r["max_tokens"]
        finish = [c["choices"][0]["finish_reason"] for c in r["chunks"] if c["choices"]]
        assert finish[-1] == "length" and finish.count("length") == 1
    # Exactly one engine request per HTTP request.
    assert server.call("num_requests") - before == NUM_REQUESTS
    print(f"{NUM_REQUESTS} streamed requests from {NUM_CLIENTS} clients in {elapsed:.1f} s")
