"""/openapi.json as the API really is: its request bodies, its error responses, its key.

The routes read and validate their bodies themselves (off the event loop, bounded first:
body_bounds.py), so FastAPI saw no body parameter and published none, nor any response but
200: a schema-driven client or tester could not see what to send or what comes back. Here
each route declares its responses (``responses_for``) and ``publish_request_bodies`` adds
the request models (their JSON Schema, with every bound the server checks) to the schema
FastAPI generates, with the Bearer key the /v1 routes need.
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
        models = [(model, "validation") for model in bodies.values()]
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
            if path.startswith("/v1/"):
                for operation in methods.values():
                    operation["security"] = [{"bearer": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
