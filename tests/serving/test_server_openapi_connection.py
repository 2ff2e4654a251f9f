"""/openapi.json publishes, on every route, what the connection layer may answer before the
route runs (400, 408, 413, 429, 431, 503 as OpenAI's error JSON), beside the route's own
answers with the same status."""

from __future__ import annotations

from hardening_helpers import in_process_server

from claimbench.serving.api.openapi import CONNECTION_REASONS

ERROR = "#/components/schemas/ErrorResponse"


def refs(schema: dict) -> set[str]:
    return {s["$ref"] for s in schema.get("anyOf", [schema]) if "$ref" in s}


def test_every_route_publishes_the_connection_layer_errors():
    schema = in_process_server().app.openapi()
    assert "ErrorResponse" in schema["components"]["schemas"]
    operations = [
        (path, method, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    ]
    assert {"/health", "/health/ready", "/metrics", "/v1/models"} <= {p for p, _, _ in operations}
    for path, method, operation in operations:
        for status in CONNECTION_REASONS:
            response = operation["responses"][str(status)]
            published = response["content"]["application/json"]["schema"]
            assert ERROR in refs(published), (path, method, status)
    # The route's own 503 (a health answer) stays published beside the connection's.
    ready_503 = schema["paths"]["/health/ready"]["get"]["responses"]["503"]
    assert refs(ready_503["content"]["application/json"]["schema"]) == {
        ERROR,
        "#/components/schemas/HealthStatus",
    }
