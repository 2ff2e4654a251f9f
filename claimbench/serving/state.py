"""Everything a running server holds: the engine, tenants, template, metrics, golden.

Built once before uvicorn starts, so start-up work (the golden recording) happens before
the first request can arrive. The engine is one of two ``ServingEngine``s: a
``ProcessEngine`` (its own process; what ``claimbench serve`` runs, server.py) or an
``AsyncEngine`` on a thread of this process over an engine the caller holds
(``build_state``: an experiment that reads its engine's records afterwards).
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from claimbench.engine.engine import LLMEngine
from claimbench.engine.worker.sampler import SamplingParams
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api.chat import ChatTemplate
from claimbench.serving.api.limits import BODY_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES, max_token_bytes
from claimbench.serving.engine_loop.async_engine import (
    KEEP_FINISHED_REQUESTS,
    AsyncEngine,
    EngineSnapshot,
    RequestStream,
)
from claimbench.serving.monitoring.health import GOLDEN_PROMPT, Readiness, record_golden
from claimbench.serving.monitoring.metrics import ServerMetrics
from claimbench.serving.tenants import TenantKeys

SINGLE_TENANT = "default"  # every request's tenant when no tenants file is given


class PrefixSharing(StrEnum):
    """Who may share prefix-cache blocks. The engine runs in its "salted" mode and the
    server chooses each request's salt, so a request's own ``cache_salt`` (vLLM's field)
    narrows sharing further in every mode."""

    per_tenant = "per-tenant"  # salt = tenant + cache_salt: tenants never share (default)
    shared = "shared"  # salt = cache_salt: requests without one share across tenants
    off = "off"  # no prefix caching

    @property
    def engine_mode(self) -> str:
        return "off" if self is PrefixSharing.off else "salted"


class ServingEngine(Protocol):
    """What the routes use of an engine loop (AsyncEngine, engine_client.ProcessEngine)."""

    heartbeat: float  # time.monotonic() when the loop last went round

    @property
    def is_alive(self) -> bool: ...

    def start(self) -> None: ...

    async def shutdown(self, timeout_s: float = 30.0) -> None: ...

    async def add(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        tenant: str,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> RequestStream: ...

    def abort(self, request_id: str, reason: str = "abort") -> None: ...

    def fail_all(self, message: str) -> None: ...

    def submit(self, fn: Callable[..., Any]) -> concurrent.futures.Future: ...

    async def snapshot(self) -> EngineSnapshot: ...


@dataclass
class ServerState:
    engine: ServingEngine
    tokenizer: Tokenizer
    model_name: str
    max_model_len: int
    chat_template: ChatTemplate
    tenants: TenantKeys | None  # None: single-tenant, no API keys
    prefix_sharing: PrefixSharing
    metrics: ServerMetrics | None  # None: observed and rendered in the engine process
    golden_prompt_ids: list[int]
    golden_tokens: list[int]
    created: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False  # set on SIGTERM: admit nothing new
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # a longer body gets 413 unread
    body_timeout_s: float = BODY_TIMEOUT_S  # a body not all in by then gets 408
    metrics_key_sha256: str | None = None  # set: /metrics needs this key (as a Bearer token)
    readiness: Readiness = field(default_factory=Readiness)
    num_engine_restarts: int = 0  # engine processes started after the first one died
    engine_failure: str | None = None  # set when the engine died and restarting failed
    # The most text bytes one token covers: bounds a prompt's token count before tokenizing.
    max_token_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.max_token_bytes = max_token_bytes(self.tokenizer)

    def cache_salt(self, tenant: str, request_salt: str | None) -> str | None:
        """The prefix-cache salt of a request of ``tenant`` carrying ``request_salt``."""
        if self.prefix_sharing is PrefixSharing.per_tenant:
            # JSON keeps ("a", "b:c") and ("a:b", "c") apart, whatever the names hold.
            return json.dumps([tenant, request_salt])
        return request_salt


def build_state(
    engine: LLMEngine,
    *,
    model_dir: Path,
    model_name: str,
    tenants: TenantKeys | None,
    prefix_sharing: PrefixSharing = PrefixSharing.per_tenant,
    keep_finished_requests: int = KEEP_FINISHED_REQUESTS,
    stream_interval: int = 1,
) -> ServerState:
    """Record the golden completion on ``engine`` (idle, not yet looping) and wrap it;
    the loop keeps the newest ``keep_finished_requests`` finished requests in the engine
    and streams every ``stream_interval`` tokens (AsyncEngine).

    ValueError if the engine's prefix-caching mode does not match ``prefix_sharing``."""
    if engine.config.prefix_caching != prefix_sharing.engine_mode:
        raise ValueError(
            f"prefix sharing {prefix_sharing.value!r} needs an engine with prefix_caching="
            f"{prefix_sharing.engine_mode!r}, got {engine.config.prefix_caching!r}"
        )
    if engine.tokenizer is None:
        raise ValueError("the server needs an engine with a tokenizer")
    golden_prompt_ids = engine.tokenizer.encode(GOLDEN_PROMPT)
    golden_tokens = record_golden(engine, golden_prompt_ids)
    metrics = ServerMetrics()
    return ServerState(
        engine=AsyncEngine(
            engine,
            observer=metrics.observe,
            keep_finished_requests=keep_finished_requests,
            stream_interval=stream_interval,
        ),
        tokenizer=engine.tokenizer,
        model_name=model_name,
        max_model_len=engine.config.max_model_len,
        chat_template=ChatTemplate.for_model(model_dir),
        tenants=tenants,
        prefix_sharing=prefix_sharing,
        metrics=metrics,
        golden_prompt_ids=golden_prompt_ids,
        golden_tokens=golden_tokens,
    )
