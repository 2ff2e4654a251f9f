"""Everything a running server holds: the engine, tenants, template, golden output.

Built once before uvicorn starts (server.build_server_state), so start-up work (the golden
recording) happens before the first request can arrive. The engine is an
``EngineClient`` (engine_loop/engine_client.py): its loop in its own process, as
`claimbench serve` runs it, or on a thread over an engine the caller holds (an experiment
that reads its engine's records afterwards); the metrics are observed and rendered by
the loop either way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import StrEnum

from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api.chat import ChatTemplate
from claimbench.serving.api.limits import BODY_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES, max_token_bytes
from claimbench.serving.engine_loop.engine_client import EngineClient
from claimbench.serving.monitoring.health import Readiness
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


@dataclass
class ServerState:
    engine: EngineClient
    tokenizer: Tokenizer
    model_name: str
    max_model_len: int
    chat_template: ChatTemplate
    tenants: TenantKeys | None  # None: single-tenant, no API keys
    prefix_sharing: PrefixSharing
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
