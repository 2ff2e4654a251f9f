"""serving.serve_setup, called directly: `serve`'s limits, the engine config with its ladder
file, and how a server that ended reports its engine."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from claimbench.engine.config_ladder import Action
from claimbench.serving.serve_setup import check_serve_limits, engine_failure, serve_engine_config

LIMITS = dict(
    port=8000,
    stream_interval=1,
    max_request_bytes=1,
    max_header_bytes=1024,
    header_timeout_s=0.5,
    max_engine_restarts=0,
    max_connections_per_client=1,
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"port": 0}, "--port 0 is not a TCP port"),
        ({"port": 65536}, "--port 65536 is not a TCP port"),
        ({"stream_interval": 0}, "--stream-interval must be >= 1, got 0"),
        ({"max_request_bytes": 0}, "--max-request-bytes must be >= 1, got 0"),
        ({"max_header_bytes": 1023}, "--max-header-bytes must be >= 1024, got 1023"),
        ({"header_timeout_s": 0.0}, "--header-timeout-s must be > 0, got 0.0"),
        ({"max_engine_restarts": -1}, "--max-engine-restarts must be >= 0, got -1"),
        (
            {"max_connections_per_client": 0},
            "--max-connections-per-client must be >= 1, got 0",
        ),
        ({"kv_pool_mb": float("nan")}, "--kv-pool-mb must be a number > 0, got nan"),
        ({"kv_pool_mb": float("inf")}, "--kv-pool-mb must be a number > 0, got inf"),
        ({"kv_pool_mb": 0.0}, "--kv-pool-mb must be a number > 0, got 0.0"),
        ({"shutdown_timeout_s": -1.0}, "--shutdown-timeout-s must be a number >= 0, got -1.0"),
        (
            {"shutdown_timeout_s": float("nan")},
            "--shutdown-timeout-s must be a number >= 0, got nan",
        ),
        (
            {"model_name": " "},
            "--served-model-name must not be empty: clients send it as the model",
        ),
        # Two limits out of range: the first in the option order is the one named.
        ({"port": 0, "stream_interval": 0}, "--port 0 is not a TCP port"),
    ],
)
def test_each_limit_at_its_edge(change, message) -> None:
    check_serve_limits(**LIMITS)  # every limit at its smallest allowed value
    with pytest.raises(ValueError, match=f"^{message}"):
        check_serve_limits(**LIMITS | change)


def test_engine_config_reads_the_ladder_file_and_sizes_the_pool(tmp_path: Path) -> None:
    file = tmp_path / "ladder.yaml"
    file.write_text(
        "- {action: disable_speculation, signal: oldest_wait_s, engage: 2.0, release: 0.5}\n"
    )
    config = serve_engine_config(kv_pool_mb=1.5, ladder_file=file, max_num_seqs=4)
    assert [r.action for r in config.scheduler.ladder] == [Action.DISABLE_SPECULATION]
    assert (config.cache.kv_pool_bytes, config.scheduler.max_num_seqs) == (int(1.5 * 2**20), 4)
    assert serve_engine_config(kv_pool_mb=1.0, ladder_file=None).scheduler.ladder == ()
    file.write_text("ladder: [")
    with pytest.raises(ValueError, match="not valid YAML"):
        serve_engine_config(kv_pool_mb=1.0, ladder_file=file)


def state(failure: str | None = None, error: object = None) -> SimpleNamespace:
    return SimpleNamespace(engine_failure=failure, engine=SimpleNamespace(error=error))


def test_engine_failure_is_the_supervisor_s_reason_else_the_engine_s_error() -> None:
    assert engine_failure(state()) is None  # a clean stop
    assert engine_failure(SimpleNamespace(engine_failure=None, engine=object())) is None
    assert engine_failure(state("3 restarts failed", RuntimeError("x"))) == "3 restarts failed"
    assert engine_failure(state(None, RuntimeError("the engine process died"))) == (
        "the engine process died"
    )


def test_listening_is_checked_before_the_model_loads() -> None:
    import socket

    from claimbench.serving.serve_setup import check_listen

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=f"^cannot listen on 127.0.0.1:{port}: "):
            check_listen("127.0.0.1", port)
    check_listen("127.0.0.1", port)  # free again
    with pytest.raises(ValueError, match="^--host 'no-such-host.invalid': "):
        check_listen("no-such-host.invalid", 8000)
