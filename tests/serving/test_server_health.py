"""Liveness, golden readiness (it must fail when the weights go bad) and Prometheus metrics."""

from __future__ import annotations

import pytest
from server_helpers import MODEL, shared_server


@pytest.fixture(scope="module")
def server():
    return shared_server()


def test_liveness(server):
    with server.http(tenant=None) as http:
        response = http.get("/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"


@pytest.mark.slow
def test_readiness_passes_then_fails_on_corrupted_weights(server):
    with server.http(tenant=None) as http:
        ready = http.get("/health/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ready"

        server.call("perturb_weights", 0.5, 0)  # the server answers, with the wrong tokens
        try:
            # Still "alive" and still answering requests ...
            assert http.get("/health").status_code == 200
            body = {"model": MODEL, "prompt": "x", "max_tokens": 3}
            assert http.post("/v1/completions", json=body, headers=auth(server)).status_code == 200
            # ... but not ready (once the answer kept from before the change is dropped).
            server.state.readiness.forget()
            unready = http.get("/health/ready")
            assert unready.status_code == 503
            assert unready.json()["status"] == "unready"
            assert "differs from start-up" in unready.json()["detail"]
        finally:
            server.call("restore_weights")
        server.state.readiness.forget()
        assert http.get("/health/ready").status_code == 200


def auth(server) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.keys['alice']}"}


@pytest.mark.slow
def test_metrics_use_vllm_names_with_a_tenant_label(server):
    server.client("bob").completions.create(model=MODEL, prompt="y = 2", max_tokens=3)
    with server.http(tenant=None) as http:
        response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for name in (
        'vllm:time_to_first_token_seconds_bucket{le="0.001",tenant="bob"}',
        'vllm:inter_token_latency_seconds_count{tenant="bob"}',
        'vllm:e2e_request_latency_seconds_sum{tenant="bob"}',
        'vllm:prompt_tokens_total{tenant="bob"}',
        'vllm:generation_tokens_total{tenant="bob"}',
        'vllm:request_success_total{finished_reason="length",tenant="bob"}',
        'vllm:num_requests_running{tenant="bob"} 0.0',
        'vllm:num_requests_waiting{tenant="bob"} 0.0',
        'vllm:kv_cache_usage_perc{tenant="bob"}',
        'vllm:iteration_tokens_total_bucket{le="16.0"}',
    ):
        assert name in text, name
    # Three tokens: one time to first token, two inter-token gaps (at least, over the module).
    assert 'vllm:inter_token_latency_seconds_count{tenant="bob"} 0.0' not in text
    assert "vllm:iteration_tokens_total_count 0.0" not in text
