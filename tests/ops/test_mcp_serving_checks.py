"""server_health and server_metrics: the operator's serving URL (never the agent's), its
readiness as the server reports it, and /metrics summarized per tenant."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from mcp_helpers import Ops, make_agents

from claimbench.ops.remote import tenant_metrics

METRICS = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{tenant="alpha"} 120.0
vllm:prompt_tokens_total{tenant="beta"} 30.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="length",tenant="alpha"} 3.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",tenant="beta"} 1.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",tenant="beta"} 2.0
vllm:time_to_first_token_seconds_count{tenant="beta"} 2.0
vllm:time_to_first_token_seconds_sum{tenant="beta"} 0.25
# HELP vllm:iteration_tokens_total Tokens per engine step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_count 7.0
vllm:iteration_tokens_total_sum 70.0
"""


def test_metrics_are_summarized_per_tenant_without_buckets() -> None:
    summary = {t.tenant: t.samples for t in tenant_metrics(METRICS)}
    assert summary == {
        "alpha": {
            "vllm:prompt_tokens_total": 120.0,
            "vllm:request_success_total{finished_reason=length}": 3.0,
        },
        "beta": {
            "vllm:prompt_tokens_total": 30.0,
            "vllm:time_to_first_token_seconds_count": 2.0,
            "vllm:time_to_first_token_seconds_sum": 0.25,
        },
    }


METRICS_KEY = "cb-metrics-key"


class _Serving(BaseHTTPRequestHandler):
    """What `claimbench serve` answers on the two paths the tools read (not ready: 503),
    /metrics behind a key when the server has one (``metrics_key``)."""

    metrics_key: str | None = None

    def do_GET(self) -> None:
        if self.path == "/health/ready":
            status, body, kind = 503, b'{"ready": false, "detail": "golden differs"}', "json"
        elif (
            self.path == "/metrics"
            and self.metrics_key
            and (self.headers.get("Authorization") != f"Bearer {self.metrics_key}")
        ):
            status, body, kind = 401, b'{"error": "needs the metrics key"}', "json"
        elif self.path == "/metrics":
            status, body, kind = 200, METRICS.encode(), "plain"
        else:
            status, body, kind = 404, b"", "plain"
        self.send_response(status)
        self.send_header("Content-Type", f"application/{kind}" if kind == "json" else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=[None, METRICS_KEY], ids=["open-metrics", "keyed-metrics"])
def serving(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(request.param)


@pytest.fixture
def keyed_serving() -> Iterator[str]:
    yield from _serve(METRICS_KEY)


def _serve(metrics_key: str | None) -> Iterator[str]:
    handler = type("Serving", (_Serving,), {"metrics_key": metrics_key})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_tools_read_the_configured_server(project: Path, tmp_path: Path, serving) -> None:
    tokens = make_agents(tmp_path / "agents.yaml", checker=["check"], reader=["read"])
    ops = Ops(project, tmp_path, tokens, server_url=serving, metrics_key=METRICS_KEY)
    health = ops.call("checker", "server_health")
    assert (health["status_code"], health["ready"]) == (503, False)
    assert health["body"] == {"ready": False, "detail": "golden differs"}
    tenants = ops.call("checker", "server_metrics")["tenants"]
    assert [t["tenant"] for t in tenants] == ["alpha", "beta"]
    assert "lacks scope 'check'" in ops.refused("reader", "server_metrics").message


@pytest.mark.slow
def test_without_a_configured_server_the_tools_say_how_to_set_one(
    project: Path, tmp_path: Path
) -> None:
    tokens = make_agents(tmp_path / "agents.yaml", checker=["check"])
    ops = Ops(project, tmp_path, tokens)
    assert "--server-url" in ops.refused("checker", "server_health").message
    gone = Ops(project, tmp_path, tokens, server_url=f"http://127.0.0.1:{free_port()}")
    assert "ConnectError" in gone.refused("checker", "server_metrics").message


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_metrics_without_the_key_names_the_refusal(project, tmp_path, keyed_serving):
    tokens = make_agents(tmp_path / "agents.yaml", checker=["check"])
    ops = Ops(project, tmp_path, tokens, server_url=keyed_serving)
    assert "401" in ops.refused("checker", "server_metrics").message
