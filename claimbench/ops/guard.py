"""The guard every MCP tool call passes: who is calling, is the call well-formed, does the agent
hold the scopes it needs; and one audit line for it, whatever the answer.

It is server middleware, so it sees every tools/call before the SDK looks the tool up or
validates its arguments: an unknown tool, an unknown or ill-typed argument and a wrong token
are each refused with one MCP error naming the problem, and logged like any other call.

A schema's ``pattern`` is matched whole (``re.fullmatch``, ASCII classes), not searched as
JSON Schema says: every pattern here is anchored with ``^...$``, and a search lets ``$``
match before a final newline, so "abc\n" passed the guard and only the tool refused it.

The audit is write-ahead: a call the guard lets through is first logged as ``started`` (its
own line, with a ``call`` id), and the tool runs only if that line is on disk; a second line
with the same ``call`` id records the outcome. A log that cannot be written (not a regular
file, a directory in its place, a full disk) refuses every call instead of letting one run
unlogged. Each argument is capped in size before anything else looks at it, and what is
logged of it is capped again, so no call can grow the log by more than a few KiB.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
import jsonschema
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from claimbench.harness import provenance
from claimbench.ops.agents import Agent, Agents
from claimbench.ops.audit import REDACTED, AuditLog, is_secret_name, redact
from claimbench.ops.runbook import Runbook, current_agent
from claimbench.ops.scopes import missing_scopes

# JSON-RPC's implementation-defined server errors (-32000 to -32099).
UNAUTHENTICATED = -32001
FORBIDDEN = -32003
MAX_OUTCOME_CHARS = 500  # an error's text in the audit line, enough to name the problem
TOKEN_HELP = "over stdio: CLAIMBENCH_AGENT_TOKEN; over HTTP: Authorization: Bearer <token>"
# Every tool argument is an id, a name, a number or a short list of them: 4 KiB of JSON is
# far above any valid one, and a call past it is refused before it is checked or run.
MAX_ARGUMENT_CHARS = 4096
MAX_ARGUMENTS = 32
# What one argument may take in the audit line (longer values are cut, marked with their size).
MAX_LOGGED_ARGUMENT_CHARS = 200
_MAX_LOGGED_CONTAINERS = 8
_log = logging.getLogger(__name__)


def _json_size(value: Any) -> int | None:
    """The length of ``value``'s JSON, None when it cannot be serialised (too deep)."""
    if isinstance(value, str):
        return len(value) + 2
    try:
        return len(json.dumps(value, separators=(",", ":"), default=str))
    except (ValueError, TypeError, RecursionError):
        return None


def _cut(text: str) -> str:
    if len(text) <= MAX_LOGGED_ARGUMENT_CHARS:
        return text
    return f"{text[:MAX_LOGGED_ARGUMENT_CHARS]}...[{len(text)} chars]"


def _logged_value(value: Any) -> Any:
    """What the audit line keeps of one argument: scalars and small containers as they are,
    anything longer or more nested as its cut JSON text."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _cut(value)
    try:
        text = json.dumps(value, separators=(",", ":"), default=str)
    except (ValueError, TypeError, RecursionError):
        return "[not serialisable]"
    if len(text) <= MAX_LOGGED_ARGUMENT_CHARS and text.count("[") + text.count("{") <= (
        _MAX_LOGGED_CONTAINERS
    ):
        return redact(value)  # small, so redact's recursion is shallow
    # Cut JSON text could show a secret-named key's value: keep none of such a value.
    return REDACTED if _has_secret_key(value) else _cut(text)


def _has_secret_key(value: Any, depth: int = 0) -> bool:
    if depth > 64:
        return True  # deeper than any argument: keep none of it
    if isinstance(value, dict):
        return any(is_secret_name(k) or _has_secret_key(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_secret_key(v, depth + 1) for v in value)
    return False


def logged_arguments(arguments: Any) -> Any:
    """The arguments as the audit line records them: secret-named ones redacted, each value
    capped (see _logged_value), at most MAX_ARGUMENTS of them."""
    if not isinstance(arguments, dict):
        return _cut(str(arguments))
    logged: dict[str, Any] = {}
    for name, value in list(arguments.items())[:MAX_ARGUMENTS]:
        key = _cut(str(name))
        logged[key] = REDACTED if is_secret_name(name) else _logged_value(value)
    if len(arguments) > MAX_ARGUMENTS:
        logged["..."] = f"{len(arguments) - MAX_ARGUMENTS} more argument(s) not logged"
    return logged


def _check_sizes(tool: Any, arguments: Any) -> None:
    """INVALID_PARAMS when the call has too many arguments or one is too big."""
    if isinstance(arguments, dict):
        if len(arguments) > MAX_ARGUMENTS:
            raise MCPError(
                INVALID_PARAMS,
                f"{_cut(str(tool))}: {len(arguments)} arguments, at most {MAX_ARGUMENTS}",
            )
        for name, value in arguments.items():
            size = _json_size(value)
            if size is None or size > MAX_ARGUMENT_CHARS or len(str(name)) > 200:
                shown = "too deeply nested" if size is None else f"{size} characters of JSON"
                raise MCPError(
                    INVALID_PARAMS,
                    f"{_cut(str(tool))}: argument {_cut(str(name))!r} is {shown}, at most "
                    f"{MAX_ARGUMENT_CHARS}",
                )


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
            "call": secrets.token_hex(8),
            "agent": None,
            "tool": tool if isinstance(tool, str) and len(tool) <= 200 else _cut(str(tool)),
            "arguments": logged_arguments(arguments),
            "scope": None,
        }
        t0 = time.perf_counter()
        result = None
        started = False
        try:
            _check_sizes(tool, arguments)  # before anything parses or matches them
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
                # Write-ahead: the tool runs only once its call is on disk.
                await self._write({**record, "outcome": "started"}, t0, None)
                started = True
                result = await call_next(ctx)
            finally:
                current_agent.reset(reset)
        except MCPError as err:
            refused = err.code in (UNAUTHENTICATED, FORBIDDEN, INVALID_PARAMS)
            record["outcome"] = f"{'refused' if refused else 'error'}: {_cut_outcome(err.message)}"
            await self._finish(record, t0, result, started)
            raise
        except Exception as err:
            record["outcome"] = f"error: {type(err).__name__}: {_cut_outcome(str(err))}"
            await self._finish(record, t0, result, started)
            raise
        record["outcome"] = _outcome(result)
        await self._finish(record, t0, result, started)
        return result

    async def _write(self, record: dict[str, Any], t0: float, result: Any) -> None:
        """Append ``record``; MCPError (INTERNAL_ERROR) when the log cannot take it."""
        record["duration_s"] = round(time.perf_counter() - t0, 4)
        record["job_id"] = _job_id(result, record)
        root = self.runbook.config.root
        try:
            record["git_sha"] = await anyio.to_thread.run_sync(_git_sha, root)
            await anyio.to_thread.run_sync(self.audit.append, record)
        except (OSError, ValueError, RecursionError) as e:
            _log.error("audit log %s cannot be written: %s", self.audit.path, e)
            raise MCPError(
                INTERNAL_ERROR,
                f"the audit log cannot be written ({type(e).__name__}); the call was not run",
            ) from None

    async def _finish(self, record: dict[str, Any], t0: float, result: Any, started: bool) -> None:
        """Log the call's outcome. A refusal that cannot be logged raises (nothing ran); an
        outcome that cannot be logged after the tool ran is reported to the server's log
        only: its ``started`` line already holds the call."""
        if not started:
            await self._write(record, t0, result)
            return
        with contextlib.suppress(MCPError):  # _write logged why; the intent line stands
            await self._write(record, t0, result)


def _cut_outcome(text: str) -> str:
    return text[:MAX_OUTCOME_CHARS]


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
