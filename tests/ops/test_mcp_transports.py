"""`claimbench mcp` as an agent's client meets it: a process spoken to over stdio (the token in
its environment) and over streamable HTTP (a bearer token per request), with the SDK's client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_helpers import make_agents

from claimbench.ops.agents import TOKEN_ENV_VAR
from claimbench.ops.audit_key import default_key_file, load_key
from claimbench.ops.audit_verify import verify
from claimbench.ops.guard import FORBIDDEN, UNAUTHENTICATED


def mcp_args(project: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "claimbench",
        "--root",
        str(project),
        "mcp",
        "--agents",
        str(tmp_path / "agents.yaml"),
        "--audit-log",
        str(tmp_path / "audit.jsonl"),
        *extra,
    ]


async def calls(client: Client) -> tuple[list[str], dict, MCPError | None]:
    """List the tools, list the claims, try a run: what a read-only agent gets for each."""
    names = [t.name for t in (await client.list_tools()).tools]
    claims = await client.call_tool("list_claims", {})
    try:
        await client.call_tool("run_claims", {"claims": ["fake-pass"]})
        refused = None
    except MCPError as err:
        refused = err
    return names, claims.structured_content, refused


@pytest.mark.slow
def test_stdio_agent_with_its_token_in_the_environment(project: Path, tmp_path: Path) -> None:
    tokens = make_agents(tmp_path / "agents.yaml", reader=["read"])
    params = StdioServerParameters(
        command=sys.executable,
        args=mcp_args(project, tmp_path),
        env={**os.environ, TOKEN_ENV_VAR: tokens["reader"]},
    )

    async def main():
        async with Client(params, read_timeout_seconds=120) as client:
            return await calls(client)

    names, claims, refused = asyncio.run(main())
    assert "run_claims" in names and "job_status" in names
    assert [c["id"] for c in claims["claims"]][:2] == ["fake-pass", "fake-fail"]
    assert refused is not None and refused.code == FORBIDDEN
    entries = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    entries = [e for e in entries if e["outcome"] != "started"]
    assert [(e["agent"], e["tool"], e["outcome"].split(":")[0]) for e in entries] == [
        ("reader", "list_claims", "ok"),
        ("reader", "run_claims", "refused"),
    ]
    assert verify(tmp_path / "audit.jsonl", load_key(default_key_file())).ok
    assert not (project / "results" / "runs").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _block_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


@pytest.mark.slow
def test_http_server_started_with_stop_signals_blocked_still_stops(project, tmp_path) -> None:
    # A runner that blocks SIGINT and SIGTERM passes the mask on: the server must still stop.
    make_agents(tmp_path / "agents.yaml", reader=["read"])
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, *mcp_args(project, tmp_path, "--http", "--port", str(port))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_block_stop_signals,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        assert process.poll() is None, "claimbench mcp --http exited"
        process.terminate()
        assert process.wait(timeout=30) is not None
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def http_server(project: Path, tmp_path: Path, request: pytest.FixtureRequest):
    tokens = make_agents(tmp_path / "agents.yaml", reader=["read"], operator=["read", "run"])
    port = free_port()
    extra = getattr(request, "param", ())
    # The operator's own token in the server's environment must not authenticate HTTP callers.
    env = {**os.environ, TOKEN_ENV_VAR: tokens["operator"]}
    process = subprocess.Popen(
        [sys.executable, *mcp_args(project, tmp_path, "--http", "--port", str(port), *extra)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.3)
    assert process.poll() is None, "claimbench mcp --http exited"
    yield f"http://127.0.0.1:{port}/mcp", tokens
    process.terminate()
    process.wait(timeout=30)


def over_http(url: str, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def main():
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return await calls(client)

    return asyncio.run(main())


@pytest.mark.slow
def test_http_agents_are_their_bearer_tokens(http_server, tmp_path: Path) -> None:
    url, tokens = http_server
    names, claims, refused = over_http(url, tokens["reader"])
    assert "run_claims" in names and len(claims["claims"]) == 5
    assert refused is not None and refused.code == FORBIDDEN
    for token in (None, "cba-wrong"):
        with pytest.raises(BaseException) as caught:
            over_http(url, token)
        errors = [caught.value]
        while isinstance(errors[-1], BaseExceptionGroup):
            errors.append(errors[-1].exceptions[0])
        assert isinstance(errors[-1], MCPError) and errors[-1].code == UNAUTHENTICATED
    entries = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    entries = [e for e in entries if e["outcome"] != "started"]
    assert [e["agent"] for e in entries] == ["reader", "reader", None, None]
    assert verify(tmp_path / "audit.jsonl", load_key(default_key_file())).ok


@pytest.mark.slow
@pytest.mark.parametrize("http_server", [("--header-timeout-s", "1")], indirect=True)
def test_http_slow_headers_are_closed(http_server) -> None:
    url, _ = http_server
    port = int(url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
        answer = b""
        while chunk := conn.recv(4096):  # socket.timeout (a failure) if it is never closed
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_a_bad_stdio_token_at_start_is_audited(project: Path, tmp_path: Path, monkeypatch):
    from cli_helpers import invoke

    make_agents(tmp_path / "agents.yaml", reader=["read"])
    log = tmp_path / "audit.jsonl"
    for token, problem in (("cba-wrong", "is not the token of any agent"), ("", "is not set")):
        monkeypatch.setenv(TOKEN_ENV_VAR, token)
        result = invoke(*mcp_args(project, tmp_path)[2:])
        assert result.exit_code == 2 and problem in result.stderr
        entry = json.loads(log.read_text().splitlines()[-1])
        assert entry["outcome"].startswith("refused: start over stdio: ")
        assert problem in entry["outcome"] and "cba-wrong" not in entry["outcome"]
    assert verify(log, load_key(default_key_file())).ok
