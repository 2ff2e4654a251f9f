"""`claimbench mcp`: the runbook's tools on an MCP server (the official SDK's MCPServer), over
stdio for a local CLI agent or streamable HTTP, every call through the guard (ops/guard.py)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from claimbench.ops.agents import Agents
from claimbench.ops.audit import AuditLog
from claimbench.ops.guard import Guard
from claimbench.ops.jobs import JobManager
from claimbench.ops.runbook import OpsConfig, Runbook

INSTRUCTIONS = (
    "claimbench's runbook: read claims, scores, runs, budget and env; check (doctor: does the "
    "engine generate the model's own output; tpu_check: does the step compile for a TPU chip; "
    "the serving deployment's readiness and metrics); run claims, score, build the site and "
    "warm the compilation cache. Long work (run_claims, tpu_check, warm_cache) returns a job: "
    "poll job_status, stop it with job_cancel. Each agent holds scopes (read, check, run, "
    "spend); every call is audited."
)


def build_server(
    config: OpsConfig, agents: Agents, audit: AuditLog, jobs: JobManager, *, stdio_token: str | None
) -> MCPServer:
    """The MCP server over one claims project; ``stdio_token`` is the launching environment's
    agent token (it authenticates calls that do not come over HTTP)."""
    server = MCPServer("claimbench", instructions=INSTRUCTIONS)
    runbook = Runbook(config, jobs)
    for name, fn in runbook.tools().items():
        server.add_tool(fn, name=name, structured_output=True)

    async def list_schemas() -> dict[str, dict[str, Any]]:
        return {tool.name: tool.input_schema for tool in await server.list_tools()}

    server.middleware.append(Guard(agents, audit, runbook, list_schemas, stdio_token=stdio_token))
    return server


def serve_stdio(server: MCPServer, jobs: JobManager) -> None:
    """Serve on stdin/stdout until the client closes them; running jobs are then cancelled."""
    try:
        server.run("stdio")
    finally:
        jobs.shutdown()


def serve_http(server: MCPServer, jobs: JobManager, host: str, port: int) -> None:
    """Serve streamable HTTP at http://host:port/mcp until interrupted."""
    try:
        server.run("streamable-http", host=host, port=port)
    finally:
        jobs.shutdown()
