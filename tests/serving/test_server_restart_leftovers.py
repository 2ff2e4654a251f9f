"""What an engine restart leaves behind: no pipe of the dead process stays open in the
server (each restart leaked two), every per-tenant series on /metrics survives it and never
goes down, and the new process loads its programs from the persistent compilation cache
instead of compiling them again."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re

import httpx
import pytest
from server_helpers import MODEL, TEST_ENGINE, free_port, start_server, wait_for
from typer.testing import CliRunner

from claimbench.cli.main import app as cli
from claimbench.harness.context import COMPILE_CACHE_DIR
from claimbench.models.checkpoint import default_model_path
from claimbench.serving import server as server_module
from claimbench.serving.engine_loop.process_engine import ProcessEngine
from claimbench.serving.monitoring.metrics import ServerMetrics
from claimbench.serving.server import ServeOptions

NUM_KILLS = 2
SERIES = 'vllm:generation_tokens_total{tenant="default"}'


def open_pipes() -> int:
    """Pipes this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own, closed meanwhile
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
    return count


def generated(metrics_text: str) -> float | None:
    """The default tenant's generated-token counter, or None when the series is absent."""
    match = re.search(re.escape(SERIES) + r" (\S+)", metrics_text)
    return float(match.group(1)) if match else None


def test_metric_totals_carry_every_series_into_new_metrics():
    old = ServerMetrics()
    old.prompt_tokens.labels("alice").inc(7)
    old.success.labels("alice", "length").inc(2)
    old.rejected.labels("bob").inc()
    old.ttft.labels("alice").observe(0.03)
    old.tenants_seen.add("idle")
    new = ServerMetrics(old.totals())
    assert new.totals() == old.totals()
    assert new.ttft.labels("alice").counts == old.ttft.labels("alice").counts
    assert "idle" in new.tenants_seen


@pytest.mark.slow  # starts an engine process three times (precompiled; cached after the first)
def test_restarts_leak_no_pipe_keep_tenant_series_and_load_from_the_compile_cache(tmp_path):
    engine = dataclasses.replace(
        TEST_ENGINE, max_num_seqs=4, compilation_cache_dir=tmp_path / "xla"
    )
    options = ServeOptions(
        model_dir=default_model_path(),
        engine=engine,
        model_name=MODEL,
        port=free_port(),
        log_level="warning",
        shutdown_timeout_s=5,
    )
    running = start_server(options, {})
    body = {"model": MODEL, "prompt": "x = ", "max_tokens": 3, "ignore_eos": True}
    try:
        first = running.state.engine
        assert first.info.num_cache_hits == 0  # an empty cache: everything compiled
        with httpx.Client(base_url=running.url, timeout=60) as http:
            baseline = open_pipes()
            last_seen = 0.0
            for _ in range(NUM_KILLS):
                assert http.post("/v1/completions", json=body).status_code == 200
                seen = generated(http.get("/metrics").text)
                assert seen is not None and seen >= last_seen + 3
                last_seen = seen
                dead = running.state.engine
                dead.kill()
                assert wait_for(lambda d=dead: running.state.engine is not d, timeout_s=240)
                assert wait_for(lambda: http.get("/health").status_code == 200, timeout_s=60)
                carried = generated(http.get("/metrics").text)
                assert carried is not None and carried >= last_seen  # present, not reset
            assert open_pipes() == baseline
            restarted = running.state.engine
            assert isinstance(restarted, ProcessEngine)
            assert restarted.info.num_compiled > 0
            # It loads from the persistent cache (3 of 6 step programs on a heavily loaded host,
            # all 6 on an idle one): without the cache a restart loads none.
            assert restarted.info.num_cache_hits > 0
    finally:
        running.stop()


@pytest.mark.parametrize(
    ("flag", "expected"), [([], COMPILE_CACHE_DIR), (["--no-compile-cache"], None)]
)
def test_serve_uses_the_persistent_compilation_cache(monkeypatch, flag, expected):
    seen = []

    def build(options):
        seen.append(options.engine.compilation.compilation_cache_dir)
        raise ValueError("stopped after the options")

    monkeypatch.setattr(server_module, "build_server_state", build)
    result = CliRunner().invoke(cli, ["serve", "--port", str(free_port()), *flag])
    assert result.exit_code == 2 and "stopped after the options" in result.output
    assert seen == [expected]
