"""`claimbench mcp`: the runbook's tools on an MCP server (the official SDK's MCPServer), over
stdio for a local CLI agent or streamable HTTP, every call through the guard (ops/guard.py)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
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


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP client may hold of `claimbench mcp --http`."""

    header_timeout_s: float = 10.0  # headers not done by then: 408, closed (serve's default)
    max_header_bytes: int = 64 * 2**10  # longer headers: 431, closed
    max_connections: int = 64  # open connections at most; more get 503

    def __post_init__(self) -> None:
        if not self.header_timeout_s > 0:
            raise ValueError(f"header_timeout_s must be > 0, got {self.header_timeout_s}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")


def serve_http(
    server: MCPServer, jobs: JobManager, host: str, port: int, limits: HttpLimits
) -> None:
    """Serve streamable HTTP at http://host:port/mcp until interrupted. The SDK's own runner
    starts uvicorn with no bound on header time (slowloris connections stayed open), so the
    app runs on the serving side's header-limited protocol (serving/api/http_limits.py)."""
    import uvicorn

    from claimbench.serving.api.http_limits import limited_protocol

    config = uvicorn.Config(
        server.streamable_http_app(host=host),  # host: the SDK's DNS-rebinding protection
        host=host,
        port=port,
        http=limited_protocol(limits.max_header_bytes, limits.header_timeout_s),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        limit_concurrency=limits.max_connections,
        log_level="warning",
        access_log=False,
    )
    # A signal mask is inherited across fork and exec: started by a runner that blocks
    # SIGINT and SIGTERM, uvicorn's handlers never heard them and the server (and its jobs'
    # workers) ran on. Unblocked here, before uvicorn installs its handlers.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        uvicorn.Server(config).run()
    finally:
        jobs.shutdown()
