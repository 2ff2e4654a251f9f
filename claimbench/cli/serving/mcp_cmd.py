"""`claimbench mcp`: the runbook as MCP tools for an agent, over stdio or streamable HTTP."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.admin.secret_options import (
    METRICS_KEY_ENV_VAR,
    MetricsKeyFileOption,
    read_secret,
)
from claimbench.cli.common import fail, global_options
from claimbench.cli.extras import require_extra
from claimbench.cli.project import RESULTS_DIR
from claimbench.ops.agents import TOKEN_ENV_VAR
from claimbench.ops.audit import DEFAULT_LOG
from claimbench.ops.audit_key import KEY_FILE_ENV_VAR
from claimbench.serving.clients.urls import check_http_url


def mcp(
    ctx: typer.Context,
    agents: Annotated[Path, typer.Option(help="The agents file (`claimbench agents add`).")] = Path(
        "agents.yaml"
    ),
    audit_log: Annotated[
        Path | None,
        typer.Option(help=f"Where every call is logged (default: <root>/{DEFAULT_LOG})."),
    ] = None,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP (bearer tokens), not stdio.")
    ] = False,
    host: Annotated[str, typer.Option(help="--http: the address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="--http: the port.", min=1, max=65535)] = 8765,
    server_url: Annotated[
        str | None,
        typer.Option(
            help="A running `claimbench serve` (http://host:port) for the server_health and "
            "server_metrics tools; agents cannot choose it."
        ),
    ] = None,
    metrics_key_file: MetricsKeyFileOption = None,
    audit_key_file: Annotated[
        Path | None,
        typer.Option(
            help=f"The audit log's HMAC key, created 0600 if missing, outside the log's "
            f"directory (default: ${KEY_FILE_ENV_VAR}, else "
            "$XDG_CONFIG_HOME/claimbench/audit.key).",
        ),
    ] = None,
    header_timeout_s: Annotated[
        float, typer.Option(help="--http: headers not complete this long get 408, closed.")
    ] = 10.0,
    max_connections: Annotated[
        int, typer.Option(help="--http: open connections at most; more get 503.", min=1)
    ] = 64,
) -> None:
    """Serve the runbook (claims, scores, runs, budget, doctor, tpu-check, run, score, site,
    warm cache) as MCP tools. Over stdio the agent's token is $CLAIMBENCH_AGENT_TOKEN in the
    environment the client launches this with; over --http, each request's bearer token."""
    require_extra("claimbench mcp", "ops")
    from claimbench.ops.agents import Agents
    from claimbench.ops.audit import AuditLog
    from claimbench.ops.audit_key import check_outside, default_key_file, load_or_create_key
    from claimbench.ops.guard import start_refused
    from claimbench.ops.jobs import JobManager
    from claimbench.ops.runbook import OpsConfig
    from claimbench.ops.server import HttpLimits, build_server, serve_http, serve_stdio

    opts = global_options(ctx)
    try:
        declared = Agents.load(agents)
        metrics_key = read_secret(metrics_key_file, METRICS_KEY_ENV_VAR, "--metrics-key-file")
        limits = HttpLimits(header_timeout_s=header_timeout_s, max_connections=max_connections)
    except ValueError as e:
        fail(str(e).splitlines()[0])
    given = audit_log if audit_log is not None else opts.root / DEFAULT_LOG
    # The directory resolved, the file itself not: a symlink at the log's path is refused
    # when the log is opened, never followed to whatever it names.
    log = given.parent.resolve() / given.name
    if log.is_relative_to(opts.root / RESULTS_DIR):
        fail(f"--audit-log {log} is inside {RESULTS_DIR}/: the log of who acted lives apart")
    if log.is_dir():
        fail(f"--audit-log {log} is a directory")
    key_file = audit_key_file if audit_key_file is not None else default_key_file()
    try:
        check_outside(key_file, log)
        audit = AuditLog(log, load_or_create_key(key_file, log))
    except (ValueError, OSError) as e:
        fail(f"audit key: {e}")
    if server_url is not None:
        try:
            check_http_url(server_url, "--server-url")
        except ValueError as e:
            fail(str(e))
    if http:
        from claimbench.serving.serve_setup import check_listen

        try:  # before anything is built: where uvicorn would fail only once it starts
            check_listen(host, port)
        except ValueError as e:
            fail(str(e))
    stdio_token = None
    if not http:
        stdio_token = os.environ.get(TOKEN_ENV_VAR)
        problem = None
        if not stdio_token:
            problem = f"{TOKEN_ENV_VAR} is not set: the agent's token (`claimbench agents add`)"
        elif declared.agent_for(stdio_token) is None:
            problem = f"{TOKEN_ENV_VAR} is not the token of any agent in {agents}"
        if problem is not None:
            try:
                audit.append(start_refused(problem))  # who tried is worth a line too
            except (OSError, ValueError) as e:
                fail(f"{problem} (and the audit log cannot be written: {e})")
            fail(problem)
    model = opts.model.resolve() if opts.model is not None else None
    config = OpsConfig(opts.root, model, opts.dtype, server_url, metrics_key=metrics_key)
    jobs = JobManager()
    server = build_server(config, declared, audit, jobs, stdio_token=stdio_token)
    if http:
        serve_http(server, jobs, host, port, limits)
    else:
        serve_stdio(server, jobs)
