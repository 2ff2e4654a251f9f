"""The probes that once hurt the real server (uvicorn, the engine in its own process), each
refused at its door now: an int32-overflowing top_k, a 10 MB prompt (refused in well under
0.5 s while another tenant's stream keeps flowing), a body without a length, text too long
to ever fit, a request no wait fits into its token bucket, and stop-string finishes that
/metrics counted as aborts."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
from server_helpers import MAX_MODEL_LEN, MODEL, shared_server

from claimbench.serving.api.limits import DEFAULT_MAX_REQUEST_BYTES


@pytest.fixture(scope="module")
def server():
    return shared_server()


def body(**fields) -> dict:
    return {"model": MODEL, "prompt": "def f():\n", "max_tokens": 4, **fields}


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_top_k_past_int32_is_clamped_and_every_tenant_is_still_served(server, path):
    fields = {"top_k": 2147483648, "temperature": 1.0}
    if path.endswith("chat/completions"):
        request = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        request |= {"max_tokens": 4, **fields}
    else:
        request = body(**fields)
    with server.http("tight") as http:
        assert http.post(path, json=request).status_code == 200
    with server.http("bob") as http:
        assert http.post("/v1/completions", json=body()).status_code == 200
        assert http.get("/health").status_code == 200
    assert server.state.engine.is_alive


def stream_gaps(server, tenant: str, started: threading.Event, gaps: list[float]) -> None:
    request = body(max_tokens=100, ignore_eos=True, stream=True, temperature=0)
    with (
        server.http(tenant) as http,
        http.stream("POST", "/v1/completions", json=request) as response,
    ):
        last = None
        for line in response.iter_lines():
            if line.startswith("data:"):
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now
                started.set()


def test_a_10mb_prompt_is_refused_at_once_while_another_tenant_streams(server):
    prompt = "x = 1\n" * (10 * 2**20 // 6)
    payload = json.dumps(body(prompt=prompt)).encode()
    started, gaps = threading.Event(), []
    streaming = threading.Thread(target=stream_gaps, args=(server, "bob", started, gaps))
    streaming.start()
    assert started.wait(60)
    with server.http("alice") as http:
        t0 = time.perf_counter()
        response = http.post(
            "/v1/completions", content=payload, headers={"content-type": "application/json"}
        )
        refused_s = time.perf_counter() - t0
    streaming.join(60)
    assert response.status_code == 413
    assert f"limit of {DEFAULT_MAX_REQUEST_BYTES} bytes" in response.json()["error"]["message"]
    assert refused_s < 0.5  # it once took 14-16 s (the body parsed, then tokenized)
    assert gaps and max(gaps) < 1.0  # and stalled this stream for as long


def test_a_body_without_a_length_is_cut_off_at_the_limit(server):
    def chunks():
        piece = b'{"model": "' + b"x" * 2**16
        yield piece
        for _ in range(DEFAULT_MAX_REQUEST_BYTES // 2**16 + 2):
            yield b"x" * 2**16

    with server.http("alice") as http:
        try:
            response = http.post("/v1/completions", content=chunks())
        except httpx.TransportError:  # the server may close before the client stops writing
            return
    assert response.status_code == 413


def test_text_that_cannot_fit_is_refused_before_it_is_tokenized(server):
    num_bytes = server.state.max_token_bytes * MAX_MODEL_LEN + 10
    with server.http("alice") as http:
        response = http.post("/v1/completions", json=body(prompt="y" * num_bytes))
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert f"{num_bytes} bytes" in message and "cannot fit" in message


def test_a_request_no_wait_fits_into_its_bucket_gets_400_not_429(server):
    with server.http("tight") as http:
        response = http.post("/v1/completions", json=body(max_tokens=100))
    assert response.status_code == 400  # a 429 would have clients retry it forever
    assert "retry-after" not in response.headers
    assert "token bucket of 40 tokens" in response.json()["error"]["message"]


def success_count(http: httpx.Client, reason: str) -> float:
    text = http.get("/metrics").text
    pattern = rf'vllm:request_success_total{{finished_reason="{reason}",tenant="alice"}} (\S+)'
    found = re.search(pattern, text) or re.search(
        rf'vllm:request_success_total{{tenant="alice",finished_reason="{reason}"}} (\S+)', text
    )
    return float(found.group(1)) if found else 0.0


def test_stop_string_finishes_are_counted_as_stop(server):
    with server.http("alice") as http:
        greedy = body(max_tokens=12, temperature=0, ignore_eos=True)
        text = http.post("/v1/completions", json=greedy).json()["choices"][0]["text"]
        stop = text[2:4]
        assert len(stop) == 2  # it occurs, so the stop string ends the output
        before = {r: success_count(http, r) for r in ("stop", "abort")}
        stopped = http.post("/v1/completions", json={**greedy, "stop": [stop]}).json()
        assert stopped["choices"][0]["finish_reason"] == "stop"
        deadline = time.monotonic() + 10
        while success_count(http, "stop") == before["stop"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert success_count(http, "stop") == before["stop"] + 1
        assert success_count(http, "abort") == before["abort"]
