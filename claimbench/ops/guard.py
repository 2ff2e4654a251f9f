"""The guard every MCP tool call passes: who is calling, is the call well-formed, does the agent
hold the scopes it needs; and one audit line for it, whatever the answer.

It is server middleware, so it sees every tools/call before the SDK looks the tool up or
validates its arguments: an unknown tool, an unknown or ill-typed argument and a wrong token
are each refused with one MCP error naming the problem, and logged like any other call.

A schema's ``pattern`` is matched whole (``re.fullmatch``, ASCII classes), not searched as
JSON Schema says: every pattern here is anchored with ``^...$``, and a search lets ``$``
match before a final newline, so "abc\n" passed the guard and only the tool refused it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
import jsonschema
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from claimbench.ledger import provenance
from claimbench.ops.agents import Agent, Agents
from claimbench.ops.audit import AuditLog, redact
from claimbench.ops.runbook import Runbook, current_agent
from claimbench.ops.scopes import missing_scopes

# JSON-RPC's implementation-defined server errors (-32000 to -32099).
UNAUTHENTICATED = -32001
FORBIDDEN = -32003
MAX_OUTCOME_CHARS = 500  # an error's text in the audit line, enough to name the problem
TOKEN_HELP = "over stdio: CLAIMBENCH_AGENT_TOKEN; over HTTP: Authorization: Bearer <token>"


def _pattern_fullmatch(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not re.fullmatch(pattern, instance, re.ASCII):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _pattern_fullmatch}
)


def _bearer(request: Any) -> str | None:
    """The bearer token of an HTTP request (None off HTTP or without one)."""
    headers = getattr(request, "headers", None)
    value = headers.get("authorization") if headers is not None else None
    if not value or not value.lower().startswith("bearer "):
        return None
    return value[len("bearer ") :].strip()


class Guard:
    """Authenticate, check, authorize and audit each tools/call (an SDK ServerMiddleware)."""

    def __init__(
        self,
        agents: Agents,
        audit: AuditLog,
        runbook: Runbook,
        list_schemas: Callable[[], Awaitable[dict[str, dict[str, Any]]]],
        *,
        stdio_token: str | None,
    ) -> None:
        self.agents = agents
        self.audit = audit
        self.runbook = runbook
        self._list_schemas = list_schemas
        self._schemas: dict[str, dict[str, Any]] | None = None
        self._stdio_token = stdio_token  # the launching environment's token (stdio, in-memory)

    def _authenticate(self, request: Any) -> Agent:
        # Over HTTP only the request's own header counts: the server's environment is not the
        # caller's, and an HTTP caller must never inherit the operator's stdio token.
        token = _bearer(request) if request is not None else self._stdio_token
        agent = self.agents.agent_for(token)
        if agent is None:
            raise MCPError(UNAUTHENTICATED, f"unknown or missing agent token ({TOKEN_HELP})")
        return agent

    def _check_call(self, tool: Any, arguments: Any) -> None:
        assert self._schemas is not None
        if not isinstance(tool, str) or tool not in self._schemas:
            known = ", ".join(sorted(self._schemas))
            raise MCPError(INVALID_PARAMS, f"unknown tool {tool!r}; known: {known}")
        if not isinstance(arguments, dict):
            raise MCPError(INVALID_PARAMS, f"{tool}: arguments must be an object")
        schema = self._schemas[tool]
        known_args = schema.get("properties", {})
        unknown = sorted(set(arguments) - set(known_args))
        if unknown:
            names = ", ".join(sorted(known_args)) or "none"
            raise MCPError(
                INVALID_PARAMS, f"{tool}: unknown argument {unknown[0]!r}; its arguments: {names}"
            )
        error = jsonschema.exceptions.best_match(_Validator(schema).iter_errors(arguments))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "arguments"
            raise MCPError(INVALID_PARAMS, f"{tool}: {where}: {error.message}")

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        if self._schemas is None:
            self._schemas = await self._list_schemas()
        params = ctx.params or {}
        tool, arguments = params.get("name"), params.get("arguments") or {}
        record: dict[str, Any] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "agent": None,
            "tool": tool,
            "arguments": redact(arguments) if isinstance(arguments, dict) else str(arguments),
            "scope": None,
        }
        t0 = time.perf_counter()
        result = None
        try:
            agent = self._authenticate(ctx.request)
            record["agent"] = agent.name
            self._check_call(tool, arguments)
            reset = current_agent.set(agent)
            try:
                needed = await anyio.to_thread.run_sync(self.runbook.needed_scopes, tool, arguments)
                record["scope"] = list(needed)
                missing = missing_scopes(agent.scopes, needed)
                if missing:
                    raise MCPError(
                        FORBIDDEN,
                        f"agent {agent.name!r} lacks scope {missing[0]!r}, which {tool} needs "
                        f"(it holds: {', '.join(agent.scopes)})",
                    )
                result = await call_next(ctx)
            finally:
                current_agent.reset(reset)
        except MCPError as err:
            refused = err.code in (UNAUTHENTICATED, FORBIDDEN, INVALID_PARAMS)
            record["outcome"] = f"{'refused' if refused else 'error'}: {err.message}"
            await self._log(record, t0, result)
            raise
        except Exception as err:
            record["outcome"] = f"error: {type(err).__name__}: {str(err)[:MAX_OUTCOME_CHARS]}"
            await self._log(record, t0, result)
            raise
        record["outcome"] = _outcome(result)
        await self._log(record, t0, result)
        return result

    async def _log(self, record: dict[str, Any], t0: float, result: Any) -> None:
        record["duration_s"] = round(time.perf_counter() - t0, 4)
        record["job_id"] = _job_id(result, record)
        root = self.runbook.config.root
        record["git_sha"] = await anyio.to_thread.run_sync(_git_sha, root)
        await anyio.to_thread.run_sync(self.audit.append, record)


def start_refused(problem: str) -> dict[str, Any]:
    """The audit record of a stdio start refused for its token (``problem``)."""
    return {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "agent": None,
        "tool": None,
        "arguments": {},
        "scope": None,
        "outcome": f"refused: start over stdio: {problem}",
    }


def _git_sha(root: Path) -> str | None:
    return provenance.git_state(root).get("sha")


def _structured(result: Any) -> dict[str, Any] | None:
    content = getattr(result, "structured_content", None)
    if content is None and isinstance(result, dict):
        content = result.get("structuredContent")
    return content if isinstance(content, dict) else None


def _outcome(result: Any) -> str:
    """ "ok", or the tool's own error text when it reported one (the result reaches the guard
    as the SDK's object or as its JSON, with content items as objects or dicts)."""
    is_error = getattr(result, "is_error", None)
    if is_error is None and isinstance(result, dict):
        is_error = result.get("isError")
    if not is_error:
        return "ok"
    content = getattr(result, "content", None)
    if content is None and isinstance(result, dict):
        content = result.get("content")
    content = content or []
    texts = [
        c.get("text") if isinstance(c, dict) else getattr(c, "text", None) for c in content or []
    ]
    text = " / ".join(line.strip() for t in texts if t for line in t.splitlines() if line.strip())
    return "error: " + (text[:MAX_OUTCOME_CHARS] if text else "tool error (no text)")


def _job_id(result: Any, record: dict[str, Any]) -> str | None:
    """The job a call started or looked at, if any."""
    content = _structured(result)
    if content is not None and isinstance(content.get("job_id"), str):
        return content["job_id"]
    arguments = record.get("arguments")
    job_id = arguments.get("job_id") if isinstance(arguments, dict) else None
    return job_id if isinstance(job_id, str) else None
