"""A real uvicorn server on a free loopback port, in a thread, over the shipped tiny model;
its engine in its own process, as `claimbench serve` runs it.

One server is shared by the server test modules (start-up compiles the step shapes, which
takes seconds on a busy CPU); tests that change it put it back. Its tenants file has
three tenants: alice and bob (plain) and tight (a token bucket of 40 tokens refilled at
1 token/s, for 429s). What a test reads of the engine it reads in the engine process,
through the engine loop's named diagnostics (``RunningServer.call``).
"""

from __future__ import annotations

import atexit
import functools
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import mkdtemp

import httpx
import openai

from claimbench.engine.config import EngineConfig
from claimbench.models.checkpoint import default_model_path
from claimbench.serving.api.state import ServerState
from claimbench.serving.server import GracefulServer, ServeOptions, build_server_state, make_server
from claimbench.serving.tenants import add_tenant

MODEL = "claimbench-tiny"
MAX_MODEL_LEN = 128
# f32: greedy output is batch-invariant, so golden and usage checks are exact.
TEST_ENGINE = EngineConfig(
    dtype="float32",
    max_model_len=MAX_MODEL_LEN,
    max_num_seqs=16,
    max_num_batched_tokens=64,
    kv_pool_bytes=8 * 2**20,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningServer:
    server: GracefulServer
    thread: threading.Thread
    state: ServerState
    url: str
    keys: dict[str, str]  # tenant -> API key
    tenants_file: Path

    def client(self, tenant: str = "alice", **kwargs) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=self.keys[tenant], max_retries=0, **kwargs
        )

    def http(self, tenant: str | None = "alice") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def call(self, name: str, *args):
        """The named diagnostic (serving/engine_loop/diagnostics.py) in the engine process."""
        return self.state.engine.diagnose(name, *args).result(timeout=30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def write_tenants(path: Path) -> dict[str, str]:
    return {
        "alice": add_tenant(path, "alice", {"weight": 2.0}),
        "bob": add_tenant(path, "bob", {}),
        "tight": add_tenant(path, "tight", {"token_rate": 1.0, "token_burst": 40.0}),
    }


def start_server(options: ServeOptions, keys: dict[str, str]) -> RunningServer:
    state, _ = build_server_state(options)
    server = make_server(state, options)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    url = f"http://127.0.0.1:{options.port}"
    return RunningServer(server, thread, state, url, keys, options.tenants_file)


@functools.cache
def shared_server() -> RunningServer:
    """Started on first use, stopped when the test process exits."""
    tenants_file = Path(mkdtemp(prefix="claimbench-serve-")) / "tenants.yaml"
    keys = write_tenants(tenants_file)
    options = ServeOptions(
        model_dir=default_model_path(),
        engine=TEST_ENGINE,
        tenants_file=tenants_file,
        model_name=MODEL,
        port=free_port(),
        log_level="warning",
        shutdown_timeout_s=5,
    )
    running = start_server(options, keys)
    atexit.register(running.stop)
    return running


def free_pages(running: RunningServer) -> int:
    """Pages an allocation could take now (cached pages no request holds included)."""
    stats = running.call("stats")
    return stats.num_usable_pages - stats.num_used_pages


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
