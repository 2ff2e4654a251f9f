"""`claimbench serve` takes a client's address from its connection, never from an
X-Forwarded-For header the client writes itself. uvicorn trusts that header from loopback
peers unless told not to, and the failed-key limit (auth_failures.py) counts per address:
a local guesser naming a new address in each request was never locked out, and one naming
another client's address locked that client out, its right key included."""

from __future__ import annotations

import threading
import time

import httpx
from hardening_helpers import KEYS, in_process_server
from server_helpers import free_port

from claimbench.engine.config import EngineConfig
from claimbench.models.checkpoint import default_model_path
from claimbench.serving.api.auth_failures import MAX_FAILURES
from claimbench.serving.server import ServeOptions, make_server

START_S = 30.0  # generous: how long the server may take to start (not a timing bound)


def _serve():
    options = ServeOptions(
        default_model_path(), EngineConfig(), port=free_port(), log_level="critical"
    )
    server = make_server(in_process_server().state, options)
    server.config.lifespan = "off"  # the engine is shared with other tests: leave it running
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_S
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    return server, thread


def test_a_forwarded_for_header_neither_evades_nor_aims_the_failed_key_limit():
    server, thread = _serve()
    url = f"http://127.0.0.1:{server.config.port}/v1/models"
    try:
        with httpx.Client() as client:
            answers = [
                client.get(
                    url,
                    headers={
                        "Authorization": f"Bearer guess-{i}",
                        "X-Forwarded-For": f"10.0.{i // 200}.{i % 200 + 1}",
                    },
                ).status_code
                for i in range(MAX_FAILURES + 5)
            ]
            # Another address named in the header is still this connection's address.
            right = client.get(
                url,
                headers={"Authorization": f"Bearer {KEYS['alice']}", "X-Forwarded-For": "10.9.9.9"},
            )
    finally:
        server.should_exit = True
        thread.join(10)
    assert answers == [401] * MAX_FAILURES + [429] * 5
    assert right.status_code == 429
