"""Every error leaves the server as OpenAI's error JSON with one clear message."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from claimbench.serving.api.protocol import error_body

log = logging.getLogger("claimbench.serving")


class ApiError(Exception):
    """A request the server refuses: status, message, and headers such as Retry-After."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers or {}


def validation_message(error: ValidationError) -> tuple[str, str | None]:
    """(one line naming the first bad field and why, that field's name)."""
    first = error.errors()[0]
    if first["type"] == "json_invalid":
        return f"the request body is not valid JSON: {first['ctx']['error']}", None
    if first["type"] == "model_type" and not first["loc"]:
        return "the request body must be a JSON object", None
    # Drop pydantic's union-branch labels ('str', 'list[int]') from the location.
    loc = [str(p) for p in first["loc"] if not (isinstance(p, str) and ("[" in p or p in _TYPES))]
    field = ".".join(loc) or None
    return f"{field or 'body'}: {first['msg']}", field


_TYPES = {"str", "int", "float", "bool", "list", "dict", "function-after", "constrained-int"}


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(
            error_body(e.message, e.status, e.param), status_code=e.status, headers=e.headers
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(f"invalid request: {e.errors()[0]['msg']}", 400), 400)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, e: HTTPException) -> JSONResponse:
        # Starlette's own headers kept: a 405 names the methods allowed (``Allow``).
        body = error_body(str(e.detail), e.status_code)
        return JSONResponse(body, status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> JSONResponse:
        # A bug, not the client's fault: logged with its traceback, never sent to the client.
        log.exception("unhandled error")
        return JSONResponse(error_body(f"internal error ({type(e).__name__})", 500), 500)
