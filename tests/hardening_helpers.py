"""An in-process server for the hardening tests: the app over the shipped tiny model, its
engine loop on a thread (ThreadEngine), called through httpx's ASGI transport on one event loop.
No socket and no engine process: thousands of requests take seconds."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from fastapi import FastAPI

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.engine.config_tenants import Tenant
from claimbench.models.checkpoint import default_model_path
from claimbench.serving.api.app import create_app
from claimbench.serving.api.state import ServerState
from claimbench.serving.server import ServeOptions, build_server_state
from claimbench.serving.tenants import TenantKeys, hash_key

T = TypeVar("T")
MODEL = "claimbench-tiny"
MAX_MODEL_LEN = 128
KEYS = {"alice": "cb-alice-key", "bob": "cb-bob-key", "tight": "cb-tight-key"}
TENANTS = (Tenant("alice"), Tenant("bob"), Tenant("tight", token_rate=1.0, token_burst=40.0))


@dataclass
class InProcessServer:
    state: ServerState
    app: FastAPI
    loop: asyncio.AbstractEventLoop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def client(self, tenant: str | None = "alice") -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {KEYS[tenant]}"} if tenant else {}
        transport = httpx.ASGITransport(app=self.app)
        return httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers, timeout=60
        )


@functools.cache
def in_process_server() -> InProcessServer:
    """Built once per test process (the engine compiles a few step shapes on first use)."""
    config = EngineConfig(
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        kv_pool_bytes=4 * 2**20,
        model_path=default_model_path(),
        tenants=TENANTS,
        prefix_caching="salted",
    )
    engine = build_engine(config)
    keys = TenantKeys(list(TENANTS), {hash_key(k): t for t, k in KEYS.items()})
    options = ServeOptions(default_model_path(), config, model_name=MODEL, precompile=False)
    state, _ = build_server_state(options, engine=engine, tenants=keys)
    state.engine.start()
    return InProcessServer(state, create_app(state), asyncio.new_event_loop())


def completion(**fields: Any) -> dict:
    """A small valid completion body, ``fields`` on top."""
    return {"model": MODEL, "prompt": "def f():\n", "max_tokens": 4, **fields}
