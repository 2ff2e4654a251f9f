"""The guard's write-ahead audit: a tool runs only once its call is on disk, a log that cannot
be written refuses the call, and nothing planted in the log or beside it (a deeply nested
line, a directory, a FIFO, a symlink) makes a call run unlogged or hang the server. Arguments
are capped before anything looks at them, and in what the log keeps of them."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from claimbench.ops.agents import Agent
from claimbench.ops.audit import AuditLog, head_path
from claimbench.ops.audit_key import load_or_create_key
from claimbench.ops.audit_verify import verify
from claimbench.ops.guard import MAX_ARGUMENT_CHARS, MAX_LOGGED_ARGUMENT_CHARS, Guard

SCHEMAS = {"show_claim": {"type": "object", "properties": {"claim_id": {"type": "string"}}}}


class _Agents:
    def agent_for(self, token: str | None) -> Agent | None:
        return (
            Agent(name="bot", scopes=("read",), token_sha256="0" * 64) if token == "tok" else None
        )


class _Runbook:
    def __init__(self, root: Path) -> None:
        self.config = SimpleNamespace(root=root)

    def needed_scopes(self, tool: str, arguments: dict) -> tuple[str, ...]:
        return ("read",)


@pytest.fixture
def log(tmp_path: Path) -> AuditLog:
    key = load_or_create_key(tmp_path / "keys" / "audit.key")
    audit = AuditLog(tmp_path / "audit" / "mcp.jsonl", key)
    audit.append({"tool": "list_claims", "arguments": {}})
    return audit


def call(log: AuditLog, tmp_path: Path, arguments: dict) -> tuple[list[str], object]:
    """Send one show_claim through the guard; what the tool saw of the log when it ran (None:
    it never ran) and the call's result or MCPError."""
    seen: list[str] = []

    async def schemas() -> dict:
        return SCHEMAS

    async def tool(ctx) -> dict:
        seen.append(log.path.read_bytes().splitlines()[-1].decode())
        return {"isError": False}

    guard = Guard(_Agents(), log, _Runbook(tmp_path), schemas, stdio_token="tok")
    ctx = SimpleNamespace(
        method="tools/call", params={"name": "show_claim", "arguments": arguments}, request=None
    )

    async def main() -> object:
        try:
            return await guard(ctx, tool)
        except MCPError as err:
            return err

    return seen, asyncio.run(main())


def last_entry(log: AuditLog) -> dict:
    return json.loads(log.path.read_bytes().splitlines()[-1])


def test_the_call_is_on_disk_before_the_tool_runs(log: AuditLog, tmp_path: Path) -> None:
    seen, result = call(log, tmp_path, {"claim_id": "kv-int8"})
    (when_run,) = seen
    intent = json.loads(when_run)
    assert intent["outcome"] == "started" and intent["tool"] == "show_claim"
    outcome = last_entry(log)
    assert outcome["outcome"] == "ok" and outcome["call"] == intent["call"]
    assert verify(log.path, log._key).ok


def test_a_log_that_cannot_be_written_refuses_the_call(log: AuditLog, tmp_path: Path) -> None:
    log.path.rename(tmp_path / "aside.jsonl")
    log.path.mkdir()  # a directory where the log was
    seen, result = call(log, tmp_path, {"claim_id": "kv-int8"})
    assert seen == [], "the tool ran with no audit line"
    assert isinstance(result, MCPError) and result.code == INTERNAL_ERROR
    assert "the call was not run" in result.message


def test_a_deeply_nested_line_in_the_log_neither_stops_nor_hides_calls(
    log: AuditLog, tmp_path: Path
) -> None:
    with log.path.open("ab") as f:
        f.write(b"[" * 100_000 + b"\n")
    seen, result = call(log, tmp_path, {"claim_id": "kv-int8"})
    assert json.loads(seen[0])["outcome"] == "started"
    last = last_entry(log)
    assert last["outcome"] == "ok"
    verdict = verify(log.path, log._key)
    assert verdict.problem.startswith("line 2: not a JSON line")


def test_a_fifo_at_the_head_does_not_hang_the_append(log: AuditLog) -> None:
    head_path(log.path).unlink()
    os.mkfifo(head_path(log.path))
    done: list[dict] = []
    worker = threading.Thread(target=lambda: done.append(log.append({"tool": "t"})), daemon=True)
    worker.start()
    worker.join(60)  # a hang, not a slowness: the append takes milliseconds
    assert done, "the append blocked on a FIFO at the head's path"
    assert "the head is unreadable" in done[0]["fault"]


def test_a_symlink_at_the_log_path_is_refused(log: AuditLog, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    log.path.unlink()
    log.path.symlink_to(victim)
    with pytest.raises(ValueError, match="symbolic link"):
        log.append({"tool": "t"})
    assert victim.read_text() == "precious\n"
    seen, result = call(log, tmp_path, {"claim_id": "kv-int8"})
    assert seen == [] and isinstance(result, MCPError) and result.code == INTERNAL_ERROR


def test_an_oversized_argument_is_refused_before_anything_and_logged_cut(
    log: AuditLog, tmp_path: Path
) -> None:
    size_before = log.path.stat().st_size
    seen, result = call(log, tmp_path, {"claim_id": "k" * 1_000_000})
    assert seen == []
    assert isinstance(result, MCPError) and result.code == INVALID_PARAMS
    assert f"at most {MAX_ARGUMENT_CHARS}" in result.message
    last = last_entry(log)
    assert last["outcome"].startswith("refused: ") and len(result.message) < 400
    logged = last["arguments"]["claim_id"]
    assert logged.endswith("...[1000000 chars]")
    assert len(logged) <= MAX_LOGGED_ARGUMENT_CHARS + 20
    assert log.path.stat().st_size - size_before < 2_000
