"""/openapi.json publishes what the API really takes and answers: the request models with
their bounds, OpenAI's error JSON for each refusal, the Bearer key; a 405 names the methods
allowed. The slow test runs schemathesis against the live server, bounded in cases: no
answer in the 5xx range and none that breaks the published schema."""

from __future__ import annotations

import pytest
import schemathesis
from hardening_helpers import in_process_server
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from server_helpers import shared_server

from claimbench.serving.api.body_bounds import MAX_MESSAGES

MAX_EXAMPLES = 30  # generated cases per operation: bounded, so the run takes minutes at most


@pytest.fixture(scope="module")
def schema():
    return in_process_server().app.openapi()


def body_schema(schema: dict, path: str) -> dict:
    ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return schema["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]


def test_request_bodies_are_published_with_their_bounds(schema):
    completion = body_schema(schema, "/v1/completions")
    assert {"model", "prompt"} <= set(completion["required"])
    assert completion["additionalProperties"] is False  # an unknown field is refused
    chat = body_schema(schema, "/v1/chat/completions")
    assert chat["properties"]["messages"]["maxItems"] == MAX_MESSAGES
    assert "ChatMessage" in schema["components"]["schemas"]


def test_error_responses_are_published_as_openai_errors(schema):
    responses = schema["paths"]["/v1/chat/completions"]["post"]["responses"]
    for status in ("400", "401", "404", "408", "413", "429", "500", "503"):
        ref = responses[status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorResponse")
    error = schema["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"message", "type", "code"}
    assert schema["paths"]["/v1/completions"]["post"]["security"] == [{"bearer": []}]


def test_a_405_names_the_methods_allowed():
    server = in_process_server()

    async def get():
        async with server.client() as client:
            return await client.get("/v1/completions")

    response = server.run(get())
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == 405


@pytest.mark.slow  # the shared server's engine process; MAX_EXAMPLES cases per operation
def test_schemathesis_finds_no_server_error_and_no_schema_violation():
    # Driven through hypothesis directly: schemathesis's pytest plugin does not load
    # under pytest 9.
    server = shared_server()
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {server.keys['alice']}"}
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
        response_headers_conformance,
    ]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 6
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def exchange(case) -> None:
            case.call_and_validate(headers=headers, checks=checks, timeout=60)

        exchange()
