"""Building and running a server: its state from options, uvicorn, graceful SIGTERM.

The engine runs in its own process (engine_core.py), built there from the options; this
process keeps HTTP, tenants, tokenization and detokenization, so the two never wait on one
another's Python lock, and (`serve`'s default) runs under SCHED_BATCH, so its wake-ups never
preempt the engine's threads on a shared core (batch_policy.py). A caller that holds its
engine and reads it afterwards (lab/load/http_serving.py) gets the same loop on a thread
(``build_server_state(..., engine=...)``): one builder, one message protocol. On SIGTERM the server
stops admitting (new requests get 503), uvicorn stops accepting connections and waits up
to ``shutdown_timeout_s`` for in-flight responses (streams run to their end), then the
engine process aborts whatever is left and exits, and so does the server, with 0.
uvicorn on its own re-raises the signal after shutting down, which would end the process
"killed by SIGTERM" (exit -15) even after a clean drain. Shortly before the grace period
ends, whatever is still live is ended (``fail_all``): every stream gets an error event and
``[DONE]`` rather than being cut mid-body. An engine process that dies is restarted
(supervisor.py); when restarting fails the server ends, and ``serve`` exits non-zero.

uvicorn runs with bounds on request headers (http_limits.py: size and time), on the
connections one client holds and on how long a connection answered early stays open
(http_limits.py), and the app with bounds on bodies (limits.py: size and time).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util
import logging
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn

from claimbench.engine.config import EngineConfig
from claimbench.engine.engine import LLMEngine
from claimbench.models.checkpoint import read_config
from claimbench.models.generation_config import stop_token_ids_source
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api.app import create_app
from claimbench.serving.api.chat import ChatTemplate
from claimbench.serving.api.http_limits import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_HEADER_BYTES,
    limited_protocol,
)
from claimbench.serving.api.limits import BODY_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES
from claimbench.serving.api.state import PrefixSharing, ServerState
from claimbench.serving.engine_loop.batch_policy import set_batch_policy
from claimbench.serving.engine_loop.engine_client import EngineClient
from claimbench.serving.engine_loop.process_engine import ProcessEngine
from claimbench.serving.engine_loop.protocol import KEEP_FINISHED_REQUESTS, CoreOptions
from claimbench.serving.engine_loop.thread_engine import ThreadEngine
from claimbench.serving.supervisor import MAX_RESTARTS, EngineSupervisor
from claimbench.serving.tenants import TenantKeys, hash_key

log = logging.getLogger("claimbench.serving")
ABORT_MARGIN_S = 1.0  # live requests are ended this long before the grace period does


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
    # This process under SCHED_BATCH once the engine process runs (batch_policy.py): `serve`
    # sets it; off here, so a server started inside another program leaves its threads be.
    api_batch_policy: bool = False
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # a longer body gets 413
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES  # longer headers get 431
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S  # headers not done by then get 408
    body_timeout_s: float = BODY_TIMEOUT_S  # a body not all in by then gets 408 and a close
    # One client address's open connections at most; another gets 429 and is closed.
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    metrics_key: str | None = None  # set: /metrics needs it as a Bearer key
    max_engine_restarts: int = MAX_RESTARTS  # tries to replace a dead engine process
    # Finished requests the engine keeps (the newest), for a look at what just ran.
    keep_finished_requests: int = KEEP_FINISHED_REQUESTS


def build_server_state(
    options: ServeOptions,
    *,
    engine: LLMEngine | None = None,
    tenants: TenantKeys | None = None,
) -> tuple[ServerState, list[str]]:
    """Load tenants and the tokenizer, start the engine loop (it precompiles the engine
    and records the golden output) and wait until it is ready.

    Without ``engine`` the loop runs in a spawned process that builds the engine from
    ``options.engine`` (what `claimbench serve` runs). With one, the loop runs on a thread
    of this process over it, under its own config, which must already have the prefix
    caching ``options.prefix_sharing`` needs; the caller reads it once the server has
    stopped. ``tenants`` replaces ``options.tenants_file``'s.

    Returns the state and the start-up lines to print. ValueError on bad options,
    EngineProcessError when the engine process fails to start."""
    if tenants is None and options.tenants_file:
        tenants = TenantKeys.load(options.tenants_file)
    mode = options.prefix_sharing.engine_mode
    if engine is not None and engine.config.cache.prefix_caching != mode:
        raise ValueError(
            f"prefix sharing {options.prefix_sharing.value!r} needs an engine with "
            f"prefix_caching={mode!r}, got {engine.config.cache.prefix_caching!r}"
        )
    tokenizer = Tokenizer.from_dir(options.model_dir)
    chat_template = ChatTemplate.for_model(options.model_dir)
    chat_template.check()  # a bad template or stop id ends start-up before the engine's
    stop_ids = read_config(options.model_dir).stop_token_ids
    names = ", ".join(f"{i} {tokenizer.tokenizer.id_to_token(i)}" for i in stop_ids)
    lines = [
        f"stop token ids: {names or 'none'} (from {stop_token_ids_source(options.model_dir)})",
        f"chat template: {chat_template.origin}",
    ]
    if tenants is None:
        lines.append("single-tenant: no --tenants file, so every request is tenant 'default'")
        lines.append("and no API key is checked")
    else:
        names = ", ".join(t.id for t in tenants.tenants)
        lines.append(f"{len(tenants.tenants)} tenants from {options.tenants_file}: {names}")
    client = _engine_client(options, engine, tenants)
    info = client.launch()
    if isinstance(client, ProcessEngine):
        lines.append(f"engine process {client.pid}")
    else:
        lines.append("engine loop on a thread of this process")
    if options.api_batch_policy:  # after the spawn: the engine process keeps the normal one
        lines.append(set_batch_policy(True))
    lines.append(f"async scheduling: {'on' if info.async_scheduling else 'off'}")
    if options.precompile:
        lines.append(
            f"compiled {info.num_compiled} step shapes in {info.compile_s:.1f} s "
            f"({info.num_cache_hits} programs loaded from the compilation cache)"
        )
    lines.append(f"golden completion recorded: {info.golden_tokens}")
    lines.append(f"event loop: {event_loop()}")
    state = ServerState(
        engine=client,
        tokenizer=tokenizer,
        model_name=options.model_name or options.model_dir.name,
        max_model_len=info.max_model_len,
        chat_template=chat_template,
        tenants=tenants,
        prefix_sharing=options.prefix_sharing,
        golden_prompt_ids=info.golden_prompt_ids,
        golden_tokens=info.golden_tokens,
        max_request_bytes=options.max_request_bytes,
        body_timeout_s=options.body_timeout_s,
        metrics_key_sha256=hash_key(options.metrics_key) if options.metrics_key else None,
    )
    if options.metrics_key:
        lines.append("/metrics needs the metrics key")
    return state, lines


def _engine_client(
    options: ServeOptions, engine: LLMEngine | None, tenants: TenantKeys | None
) -> EngineClient:
    """The engine loop ``build_server_state`` starts: in a process, or over ``engine``."""
    if engine is not None:
        config = engine.config
    else:
        given = options.engine
        config = dataclasses.replace(
            given,
            model=dataclasses.replace(given.model, model_path=options.model_dir),
            cache=dataclasses.replace(
                given.cache, prefix_caching=options.prefix_sharing.engine_mode
            ),
            scheduler=dataclasses.replace(
                given.scheduler,
                tenants=tuple(tenants.tenants) if tenants else given.scheduler.tenants,
            ),
        )
    core = CoreOptions(
        config,
        precompile=options.precompile,
        stream_interval=options.stream_interval,
        keep_finished_requests=options.keep_finished_requests,
    )
    return ProcessEngine(core) if engine is None else ThreadEngine(engine, core)


class GracefulServer(uvicorn.Server):
    """uvicorn, with SIGTERM as a drain that ends in exit 0, live requests ended just
    before the grace period does, and the engine process restarted when it dies."""

    def __init__(
        self,
        config: uvicorn.Config,
        state: ServerState,
        supervisor: EngineSupervisor | None = None,
    ) -> None:
        super().__init__(config)
        self.claimbench_state = state
        self.supervisor = supervisor
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch: asyncio.Future | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.supervisor is not None:
            watch = self.supervisor.watch(self.claimbench_state, self.give_up)
            self._watch = asyncio.ensure_future(watch)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await super().shutdown(sockets)

    def give_up(self) -> None:
        """End the server (the engine cannot be restarted): ``serve`` then exits 1."""
        self.claimbench_state.draining = True
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.claimbench_state.draining = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.end_live_before_deadline)
        if sig == signal.SIGTERM:
            self.should_exit = True  # not recorded: uvicorn would re-raise it at the end
            return
        super().handle_exit(sig, frame)

    def end_live_before_deadline(self) -> None:
        """Shortly before the grace period ends, end every request still live, so each
        stream closes with an error event and [DONE] instead of being cut (on the loop)."""
        grace_s = self.config.timeout_graceful_shutdown
        if grace_s is None:
            return
        delay = max(grace_s - min(ABORT_MARGIN_S, grace_s / 2), 0.0)
        engine = self.claimbench_state.engine
        self._loop.call_later(delay, engine.fail_all, "the server shut down")


def event_loop() -> str:
    """uvloop when it imports (the serve extra installs it), else asyncio's own loop."""
    try:
        importlib.import_module("uvloop")
    except ImportError:
        return "asyncio"
    return "uvloop"


def make_server(state: ServerState, options: ServeOptions) -> GracefulServer:
    loop = event_loop()
    log.info("event loop: %s", loop)
    http = "auto"
    if importlib.util.find_spec("httptools") is not None:
        http = limited_protocol(
            options.max_header_bytes,
            options.header_timeout_s,
            options.max_connections_per_client,
        )
    config = uvicorn.Config(
        create_app(state),
        host=options.host,
        port=options.port,
        loop=loop,
        http=http,
        # h11 (without httptools) bounds header bytes only; httptools both (http_limits.py).
        h11_max_incomplete_event_size=options.max_header_bytes,
        log_level=options.log_level,
        timeout_graceful_shutdown=options.shutdown_timeout_s,
        access_log=False,
        # A client's address is its connection's: uvicorn would otherwise take it from an
        # X-Forwarded-For header that any loopback client writes, and the failed-key limit
        # counts per address (a guesser could name a new one each time, or aim it at another).
        proxy_headers=False,
    )
    supervisor = None
    if isinstance(state.engine, ProcessEngine) and options.max_engine_restarts > 0:
        supervisor = EngineSupervisor(
            state.engine.options, max_restarts=options.max_engine_restarts
        )
    return GracefulServer(config, state, supervisor)
