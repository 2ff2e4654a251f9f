"""/openapi.json as the API really is: its request bodies, its error responses, its key.

The routes read and validate their bodies themselves (off the event loop, bounded first:
body_bounds.py), so FastAPI saw no body parameter and published none, nor any response but
200: a schema-driven client or tester could not see what to send or what comes back. Here
each route declares its responses (``responses_for``) and ``publish_request_bodies`` adds
the request models (their JSON Schema, with every bound the server checks) to the schema
FastAPI generates, with the Bearer key the /v1 routes need. The connection layer
(http_limits.py, limits.BodyLimit) answers before any route runs, on every path: a request
it cannot parse (400), headers or a body too slow (408), a body over the byte limit even on
a GET (413), a client over its connections or failed keys (429), headers too large or too
many (431), a server over its connections (503); those are published on every route too.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from claimbench.serving.api.protocol import ErrorResponse

_REASONS = {
    400: "The body or one of its fields is invalid, or asks for what the server does not do",
    401: "A missing or unknown API key",
    404: "A model this server does not serve",
    408: "The request body did not all arrive in time",
    413: "The body is over the byte limit, or holds more JSON objects than any request",
    429: "Over the tenant's limits: retry after Retry-After seconds",
    500: "A server bug (logged; the message names only its type)",
    503: "The engine is not running, or the server is shutting down",
}
REF = "#/components/schemas/{model}"
# What the connection layer may answer on any route, before the route runs.
CONNECTION_REASONS = {
    400: "The request is not HTTP the server can parse (its length, framing or method)",
    408: "The headers (or the body) did not all arrive in time",
    413: "The body is over the byte limit (whatever the route), or has too many chunks",
    429: "The client holds too many connections, or sent too many failed keys",
    431: "The headers are over their size or line limit",
    503: "The server holds as many connections as it may",
}


class HealthStatus(BaseModel):
    """What /health and /health/ready answer (200 when it holds, else 503)."""

    status: str
    detail: str | None = None
    loop_idle_wait_s: float | None = None


HEALTH_RESPONSES: dict[int | str, Any] = {
    200: {"model": HealthStatus, "description": "Live (or ready)"},
    503: {"model": HealthStatus, "description": "Dead, stalled, unready or draining"},
}
METRICS_RESPONSES: dict[int | str, Any] = {
    200: {
        "description": "Prometheus text",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
    401: {"model": ErrorResponse, "description": "The metrics key is needed"},
    503: {
        "description": "The engine is not running",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
}


def responses_for(*statuses: int, ok: type[BaseModel] | None = None) -> dict[int | str, Any]:
    """FastAPI ``responses=`` for a route: ``ok`` as its 200 (JSON, or server-sent events
    for a streamed request), and OpenAI's error JSON for each of ``statuses`` and 500."""
    responses: dict[int | str, Any] = {
        status: {"model": ErrorResponse, "description": _REASONS[status]}
        for status in (*statuses, 500)
    }
    if ok is not None:
        stream = {"text/event-stream": {"schema": {"type": "string"}}}
        responses[200] = {"model": ok, "description": "The result", "content": stream}
    return responses


def publish_request_bodies(app: FastAPI, bodies: dict[str, type[BaseModel]]) -> None:
    """Make ``app.openapi()`` carry each POST route's request body (path -> model) and the
    Bearer key scheme of /v1."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        models = [(model, "validation") for model in (*bodies.values(), ErrorResponse)]
        refs, defs = models_json_schema(models, ref_template=REF)
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {}).update(defs.get("$defs", {}))
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for path, model in bodies.items():
            operation = schema["paths"][path]["post"]
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[(model, "validation")]}},
            }
        for path, methods in schema["paths"].items():
            for operation in methods.values():
                add_connection_errors(operation)
                if path.startswith("/v1/"):
                    operation["security"] = [{"bearer": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def add_connection_errors(operation: dict[str, Any]) -> None:
    """Publish on ``operation`` the OpenAI error JSON of every CONNECTION_REASONS status,
    beside what the route itself may answer with that status."""
    error = {"$ref": REF.format(model="ErrorResponse")}
    responses = operation.setdefault("responses", {})
    for status, reason in CONNECTION_REASONS.items():
        response = responses.setdefault(str(status), {"description": reason})
        content = response.setdefault("content", {})
        published = content.get("application/json")
        if published is None:
            content["application/json"] = {"schema": error}
        elif published.get("schema") != error and error not in published["schema"].get("anyOf", []):
            published["schema"] = {"anyOf": [published["schema"], error]}
