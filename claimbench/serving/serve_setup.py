"""From `claimbench serve`'s options to a running server: the limits checked before anything
loads, the engine's config with its ladder read from a file, and the server run to its end,
reporting an engine that died and could not be replaced (a supervisor above must see it).
"""

from __future__ import annotations

import math
import socket
from pathlib import Path
from typing import Any

from claimbench.engine.config import EngineConfig
from claimbench.engine.config_ladder import load_ladder
from claimbench.serving import server
from claimbench.serving.api.state import ServerState
from claimbench.serving.server import ServeOptions

MIN_HEADER_BYTES = 1024  # a smaller bound would refuse ordinary clients' headers


def check_serve_limits(
    *,
    port: int,
    stream_interval: int,
    max_request_bytes: int,
    max_header_bytes: int,
    header_timeout_s: float,
    max_engine_restarts: int,
    max_connections_per_client: int = 1,
    shutdown_timeout_s: float = 0.0,
    kv_pool_mb: float = 1.0,
    model_name: str | None = None,
) -> None:
    """ValueError (one line naming the option) for the first limit out of range."""
    if not 0 < port < 65536:
        raise ValueError(f"--port {port} is not a TCP port")
    if not math.isfinite(kv_pool_mb) or not kv_pool_mb * 2**20 >= 1:
        raise ValueError(f"--kv-pool-mb must be a number > 0, got {kv_pool_mb}")
    if model_name is not None and not model_name.strip():
        raise ValueError("--served-model-name must not be empty: clients send it as the model")
    if stream_interval < 1:
        raise ValueError(f"--stream-interval must be >= 1, got {stream_interval}")
    if max_request_bytes < 1:
        raise ValueError(f"--max-request-bytes must be >= 1, got {max_request_bytes}")
    if max_header_bytes < MIN_HEADER_BYTES:
        raise ValueError(
            f"--max-header-bytes must be >= {MIN_HEADER_BYTES}, got {max_header_bytes}"
        )
    if not header_timeout_s > 0:
        raise ValueError(f"--header-timeout-s must be > 0, got {header_timeout_s}")
    if max_connections_per_client < 1:
        raise ValueError(
            f"--max-connections-per-client must be >= 1, got {max_connections_per_client}"
        )
    if max_engine_restarts < 0:
        raise ValueError(f"--max-engine-restarts must be >= 0, got {max_engine_restarts}")
    if not (math.isfinite(shutdown_timeout_s) and shutdown_timeout_s >= 0):
        raise ValueError(f"--shutdown-timeout-s must be a number >= 0, got {shutdown_timeout_s}")


def check_listen(host: str, port: int) -> None:
    """ValueError (one line) unless this process can listen on ``host``:``port`` now: an
    address that does not resolve or is not this machine's, or a port in use, is refused
    before the model loads rather than by the server after it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise ValueError(f"--host {host!r}: {e.strerror}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as e:
            raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def serve_engine_config(
    *, kv_pool_mb: float, ladder_file: Path | None, **settings: Any
) -> EngineConfig:
    """The served engine's config: a pool of ``kv_pool_mb`` MiB, the degradation ladder from
    ``ladder_file`` (none: off) and ``settings``. ValueError naming a bad file or setting."""
    ladder = load_ladder(ladder_file) if ladder_file is not None else ()
    return EngineConfig.from_flat(kv_pool_bytes=int(kv_pool_mb * 2**20), ladder=ladder, **settings)


def engine_failure(state: ServerState) -> str | None:
    """Why the server ended with its engine dead, or None after a clean stop."""
    error = getattr(state.engine, "error", None)
    if state.engine_failure is not None or error is not None:
        return state.engine_failure or str(error)
    return None


def serve_until_stopped(state: ServerState, options: ServeOptions) -> str | None:
    """Run the server (uvicorn) until it stops (SIGTERM drains it); return engine_failure."""
    # Looked up on the module at call time, so a test (or an embedder) may replace it there.
    server.make_server(state, options).run()
    return engine_failure(state)
