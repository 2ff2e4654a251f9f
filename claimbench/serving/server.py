"""Building and running a server: engine from options, uvicorn, graceful SIGTERM.

On SIGTERM the server stops admitting (new requests get 503), uvicorn stops accepting
connections and waits up to ``shutdown_timeout_s`` for in-flight responses (streams run
to their end), then the engine loop aborts whatever is left and the process exits 0.
uvicorn on its own re-raises the signal after shutting down, which would end the process
"killed by SIGTERM" (exit -15) even after a clean drain.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.serving.app import create_app
from claimbench.serving.state import PrefixSharing, ServerState, build_state
from claimbench.serving.tenants import TenantKeys

log = logging.getLogger("claimbench.serving")


@dataclass(frozen=True)
class ServeOptions:
    model_dir: Path
    engine: EngineConfig  # prefix_caching is set from prefix_sharing
    tenants_file: Path | None = None
    prefix_sharing: PrefixSharing = PrefixSharing.per_tenant
    model_name: str | None = None  # None = the model directory's name
    host: str = "127.0.0.1"
    port: int = 8000
    shutdown_timeout_s: float = 30.0
    precompile: bool = True
    stream_interval: int = 1  # tokens per streamed chunk at most (first token at once)
    log_level: str = "info"


def build_server_state(options: ServeOptions) -> tuple[ServerState, list[str]]:
    """Load tenants, build and precompile the engine, record the golden output.

    Returns the state and the start-up lines to print. ValueError on bad options."""
    tenants = TenantKeys.load(options.tenants_file) if options.tenants_file else None
    lines = []
    if tenants is None:
        lines.append("single-tenant: no --tenants file, so every request is tenant 'default'")
        lines.append("and no API key is checked")
    else:
        names = ", ".join(t.id for t in tenants.tenants)
        lines.append(f"{len(tenants.tenants)} tenants from {options.tenants_file}: {names}")
    config = dataclasses.replace(
        options.engine,
        model_path=options.model_dir,
        tenants=tuple(tenants.tenants) if tenants else options.engine.tenants,
        prefix_caching=options.prefix_sharing.engine_mode,
    )
    engine = build_engine(config)
    if options.precompile:
        num, seconds = engine.precompile()
        lines.append(f"compiled {num} step shapes in {seconds:.1f} s")
    state = build_state(
        engine,
        model_dir=options.model_dir,
        model_name=options.model_name or options.model_dir.name,
        tenants=tenants,
        prefix_sharing=options.prefix_sharing,
        stream_interval=options.stream_interval,
    )
    lines.append(f"golden completion recorded: {state.golden_tokens}")
    return state, lines


class GracefulServer(uvicorn.Server):
    """uvicorn, with SIGTERM as a drain that ends in exit 0."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.claimbench_state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.claimbench_state.draining = True
        if sig == signal.SIGTERM:
            self.should_exit = True  # not recorded: uvicorn would re-raise it at the end
            return
        super().handle_exit(sig, frame)


def make_server(state: ServerState, options: ServeOptions) -> GracefulServer:
    config = uvicorn.Config(
        create_app(state),
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        timeout_graceful_shutdown=options.shutdown_timeout_s,
        access_log=False,
    )
    return GracefulServer(config, state)
