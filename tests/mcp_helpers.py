"""Helpers for the MCP tests: agents, an in-memory server over a project, calls that fail."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError

from claimbench.ops.agents import Agents, add_agent
from claimbench.ops.audit import AuditLog
from claimbench.ops.audit_key import load_or_create_key
from claimbench.ops.audit_verify import verify
from claimbench.ops.jobs import JobManager
from claimbench.ops.runbook import OpsConfig
from claimbench.ops.server import build_server

# A fake experiment slow enough to be cancelled midway: one trial per sleep_s, 600 of them (5
# min), so that a cancel that does not stop it shows as a kill or a timeout, never as a job that
# had ended anyway (a lost Ctrl-C once let a 30-s job finish as "done": test_job_cancel.py).
SLOW_EXPERIMENT = """\
import time


def run(ctx):
    for trial in range(ctx.trials):
        time.sleep(ctx.params["sleep_s"])
        ctx.record("score", 2.0, trial=trial, unit="x")
"""

SLOW_CLAIM = """\
- id: fake-slow
  part: 3
  title: Fake claim whose trials take a while
  statement: The fake score is at least 1.
  confidence: 0.7
  scope: any
  prediction:
    - {metric: score, op: ">=", value: 1.0}
  refuted_if: The fake score is confidently below 1.
  experiment: slow
  params: {quick: {sleep_s: 0.5, trials: 600}}
"""


def add_slow_claim(project: Path) -> None:
    (project / "experiments" / "slow.py").write_text(SLOW_EXPERIMENT)
    claims = project / "claims.yaml"
    claims.write_text(claims.read_text() + SLOW_CLAIM)


def make_agents(path: Path, **scopes: list[str]) -> dict[str, str]:
    """Add each ``name=[scopes]`` to the agents file ``path``; their tokens, by name."""
    return {name: add_agent(path, name, granted) for name, granted in scopes.items()}


class Ops:
    """An MCP server over ``project`` (agents in ``tmp``), and a client call per agent."""

    def __init__(self, project: Path, tmp: Path, tokens: dict[str, str], **config: Any) -> None:
        self.project = project
        self.tokens = tokens
        self.agents = Agents.load(tmp / "agents.yaml")
        self.log = tmp / "audit" / "mcp.jsonl"
        self.key = load_or_create_key(tmp / "keys" / "audit.key")
        self.jobs = JobManager()
        options = {"model": None, "dtype": "float32", "server_url": None} | config
        self.config = OpsConfig(root=project, **options)

    def server(self, agent: str):
        return build_server(
            self.config,
            self.agents,
            AuditLog(self.log, self.key),
            self.jobs,
            stdio_token=self.tokens.get(agent, agent),
        )

    def session(self, agent: str, fn: Callable[[Client], Awaitable[Any]], **client: Any) -> Any:
        """Run ``fn(client)`` in a session of ``agent`` (its token as the launching env's)."""

        async def main() -> Any:
            async with Client(self.server(agent), **client) as c:
                return await fn(c)

        return asyncio.run(main())

    def _call(self, agent: str, tool: str, arguments: dict[str, Any] | None) -> Any:
        """The call's structured result, or the MCPError it was refused with (caught inside the
        session: escaping it, the error would come out wrapped in the client's task group)."""

        async def one(c: Client) -> Any:
            try:
                result = await c.call_tool(tool, arguments or {})
            except MCPError as err:
                return err
            assert not result.is_error, result.content
            return result.structured_content

        return self.session(agent, one)

    def call(self, agent: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """One tool call's structured result (an error raises AssertionError)."""
        result = self._call(agent, tool, arguments)
        assert not isinstance(result, MCPError), result.message
        return result

    def refused(self, agent: str, tool: str, arguments: dict[str, Any] | None = None) -> MCPError:
        """The MCP error a call is refused with (AssertionError if it is not)."""
        result = self._call(agent, tool, arguments)
        assert isinstance(result, MCPError), f"{tool} was not refused: {result}"
        return result

    def wait_job(self, agent: str, job_id: str, until: Callable[[dict], bool], timeout_s: float):
        """Poll job_status until ``until(status)``; the last status."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.call(agent, "job_status", {"job_id": job_id})
            if until(status) or time.monotonic() > deadline:
                return status
            time.sleep(0.2)

    def verify(self):
        """The audit log's verdict under this server's key."""
        return verify(self.log, self.key)

    def close(self) -> None:
        self.jobs.shutdown()
