"""The FastAPI app: OpenAI routes, tenants by API key, health, readiness and metrics.

Routes under /v1 need ``Authorization: Bearer <key>`` when the server has a tenants
file (the key selects the tenant); /health, /health/ready and /openapi.json are open, as
vLLM's are, for probes, and so is /metrics (tenant names and their traffic) unless the
server has a metrics key. A body over ``max_request_bytes`` gets 413 before it is read
(limits.py).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import NoReturn, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from claimbench.serving.api import body_bounds, completions
from claimbench.serving.api.auth_failures import FailedAuth, retry_after_header
from claimbench.serving.api.body_bounds import OFFLOAD_BYTES, TooManyContainers
from claimbench.serving.api.errors import ApiError, install_handlers, validation_message
from claimbench.serving.api.event_stream import RawSendApp
from claimbench.serving.api.limits import BodyLimit, BodyTooLarge
from claimbench.serving.api.openapi import (
    HEALTH_RESPONSES,
    METRICS_RESPONSES,
    publish_request_bodies,
    responses_for,
)
from claimbench.serving.api.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
)
from claimbench.serving.api.state import SINGLE_TENANT, ServerState
from claimbench.serving.engine_loop.engine_core import HEARTBEAT_S
from claimbench.serving.engine_loop.protocol import EngineStopped
from claimbench.serving.engine_loop.request_stream import RequestStream
from claimbench.serving.monitoring.metrics import CONTENT_TYPE
from claimbench.serving.monitoring.metrics_page import MetricsPage
from claimbench.serving.tenants import hash_key

Body = TypeVar("Body", bound=BaseModel)
# A loop that has not gone round for this long is not live: steps take milliseconds and the
# engine loop sends a heartbeat every HEARTBEAT_S (0.5 s) when idle.
STALL_S = 5.0


def create_app(state: ServerState) -> FastAPI:
    """The app over ``state``; its lifespan starts and stops the engine loop."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.engine.start()
        yield
        state.draining = True
        await state.engine.shutdown()

    app = RawSendApp(title="claimbench", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.server = state
    app.add_middleware(BodyLimit, max_bytes=state.max_request_bytes)
    install_handlers(app)

    generation = (400, 401, 404, 408, 413, 429, 503)  # what a generation request may get

    failed_auth = app.state.failed_auth = FailedAuth()

    @app.get("/v1/models", responses=responses_for(401, 429))
    async def models(request: Request) -> ModelList:
        authenticate(state, request, failed_auth)
        card = ModelCard(
            id=state.model_name, created=state.created, max_model_len=state.max_model_len
        )
        return ModelList(data=[card])

    @app.post("/v1/completions", responses=responses_for(*generation, ok=CompletionResponse))
    async def create_completion(request: Request) -> Response:
        tenant = authenticate(state, request, failed_auth)
        body = await parse(state, request, CompletionRequest)
        return await completions.completions(state, tenant, body, request)

    @app.post(
        "/v1/chat/completions", responses=responses_for(*generation, ok=ChatCompletionResponse)
    )
    async def create_chat_completion(request: Request) -> Response:
        tenant = authenticate(state, request, failed_auth)
        body = await parse(state, request, ChatCompletionRequest)
        try:
            return await completions.chat_completions(state, tenant, body, request)
        except ValueError as e:  # the chat template failed on these messages
            raise ApiError(400, str(e), param="messages") from e

    @app.get("/health", responses=HEALTH_RESPONSES)
    async def health() -> JSONResponse:
        """Liveness: the engine loop is running and going round."""
        stalled_s = time.monotonic() - state.engine.heartbeat
        if not state.engine.is_alive or stalled_s > STALL_S:
            detail = "engine loop stopped" if not state.engine.is_alive else "engine loop stalled"
            return JSONResponse({"status": "dead", "detail": detail}, status_code=503)
        return JSONResponse({"status": "ok", "loop_idle_wait_s": HEARTBEAT_S})

    @app.get("/health/ready", responses=HEALTH_RESPONSES)
    async def ready() -> JSONResponse:
        """Readiness: the golden completion still matches the one recorded at start-up."""
        if state.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        if not state.engine.is_alive:
            return JSONResponse({"status": "dead", "detail": "engine loop stopped"}, 503)
        try:
            result = await state.readiness.check(
                state.engine, state.golden_prompt_ids, state.golden_tokens
            )
        except EngineStopped:
            return JSONResponse({"status": "dead", "detail": "engine loop stopped"}, 503)
        body = {"status": "ready" if result.ok else "unready", "detail": result.detail}
        return JSONResponse(body, status_code=200 if result.ok else 503)

    async def render_metrics() -> bytes:
        return await state.engine.render_metrics()  # observed and rendered by the engine loop

    # However often /metrics is asked for, the engine renders one page per PAGE_CACHE_S.
    metrics_page = app.state.metrics_page = MetricsPage(render_metrics)

    @app.get("/metrics", responses=METRICS_RESPONSES)
    async def metrics(request: Request) -> Response:
        if state.metrics_key_sha256 is not None:
            check_failures(request, failed_auth)
            _, _, key = request.headers.get("authorization", "").partition(" ")
            digest = hash_key(key.strip())
            if not hmac.compare_digest(digest, state.metrics_key_sha256):
                refuse_key(
                    request,
                    failed_auth,
                    "/metrics needs the metrics key: 'Authorization: Bearer <key>'",
                )
        restarts = (
            "# HELP claimbench:engine_restarts_total Engine processes started after one died.\n"
            "# TYPE claimbench:engine_restarts_total counter\n"
            f"claimbench:engine_restarts_total {state.num_engine_restarts}\n"
        ).encode()
        try:
            text = await metrics_page.get(RequestStream.num_ended)
        except EngineStopped:
            return Response(b"engine loop stopped\n" + restarts, status_code=503)
        return Response(text + restarts, media_type=CONTENT_TYPE)

    publish_request_bodies(
        app,
        {"/v1/completions": CompletionRequest, "/v1/chat/completions": ChatCompletionRequest},
    )
    return app


def authenticate(state: ServerState, request: Request, failed_auth: FailedAuth) -> str:
    """The request's tenant (with a tenants file); 401 for a missing or unknown key, 429
    while its client has failed too often (auth_failures.py)."""
    if state.tenants is None:
        return SINGLE_TENANT
    check_failures(request, failed_auth)
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        refuse_key(request, failed_auth, "missing API key: send 'Authorization: Bearer <key>'")
    tenant = state.tenants.tenant_for(key.strip())
    if tenant is None:
        refuse_key(request, failed_auth, "invalid API key")
    return tenant


def _client(request: Request) -> str:
    return request.client.host if request.client else ""


def check_failures(request: Request, failed_auth: FailedAuth) -> None:
    """429 (and a close) while the request's client may not try a key."""
    wait_s = failed_auth.retry_after_s(_client(request))
    if wait_s is not None:
        raise ApiError(
            429,
            f"too many failed API keys from this client: at most {failed_auth.max_failures} "
            f"per {failed_auth.window_s:g} s",
            headers={"retry-after": retry_after_header(wait_s), "connection": "close"},
        )


def refuse_key(request: Request, failed_auth: FailedAuth, message: str) -> NoReturn:
    """401 for a missing or wrong key, counted against its client; the connection ends
    (a guesser must open a new one for each key)."""
    failed_auth.record(_client(request))
    raise ApiError(401, message, headers={"connection": "close"})


async def parse(state: ServerState, request: Request, schema: type[Body]) -> Body:
    """The validated body, or 4xx: draining (503), bad JSON or fields (400), unknown
    model (404), a field asking for what the server does not do (400)."""
    if state.draining:
        raise ApiError(503, "the server is shutting down")
    try:
        # A body trickled in byte by byte must not hold a connection and a handler forever.
        async with asyncio.timeout(state.body_timeout_s):
            raw = await request.body()
        chat = schema is ChatCompletionRequest
        max_values = body_bounds.max_json_values(state.max_model_len, chat)
        if len(raw) > OFFLOAD_BYTES:  # pydantic's work grows with the body: off the loop
            body = await asyncio.to_thread(body_bounds.decode_body, raw, schema, max_values)
        else:
            body = body_bounds.decode_body(raw, schema, max_values)
    except TimeoutError as e:
        raise ApiError(
            408, f"the request body did not arrive within {state.body_timeout_s:g} s"
        ) from e
    except (BodyTooLarge, TooManyContainers) as e:  # too many bytes, or too much to parse
        raise ApiError(413, str(e)) from e
    except ClientDisconnect as e:  # gone mid-upload: nobody to answer, nothing to log
        raise ApiError(499, "client disconnected") from e
    except ValidationError as e:
        message, field = validation_message(e)
        raise ApiError(400, message, param=field) from e
    if body.model != state.model_name:
        raise ApiError(
            404, f"model {body.model!r} does not exist; this server serves {state.model_name!r}"
        )
    reason = body.unsupported()
    if reason is not None:
        raise ApiError(400, reason)
    return body
