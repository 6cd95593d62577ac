"""The one place that turns every dock error into an HTTP response.

Services raise the dock's error family (``app.errors``); the handlers below map each class to a
status and a stable body ``{"error": {"code": ..., "message": ...}}``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import (
    Conflict,
    DockError,
    Forbidden,
    IncompatibleSpec,
    InputError,
    InvalidInput,
    InvalidPackage,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    Unauthorized,
    UnknownBase,
    UnsafePackage,
)

log = logging.getLogger(__name__)


# Most specific class first: the first match wins.
ERROR_MAP: list[tuple[type[DockError], int, str]] = [
    (Unauthorized, 401, "unauthorized"),
    (Forbidden, 403, "forbidden"),
    (NotFound, 404, "not_found"),
    (Conflict, 409, "conflict"),
    (PayloadTooLarge, 413, "payload_too_large"),
    (UnsafePackage, 422, "unsafe_package"),
    (InvalidPackage, 422, "invalid_package"),
    (IncompatibleSpec, 422, "incompatible_spec"),
    (InvalidInput, 422, "invalid_input"),
    (UnknownBase, 422, "unknown_base"),
    (InputError, 422, "invalid_input"),
    (ServiceUnavailable, 503, "service_unavailable"),
]

_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 401: "unauthorized"}


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def status_and_code(exc: DockError) -> tuple[int, str]:
    for cls, status, code in ERROR_MAP:
        if isinstance(exc, cls):
            return status, code
    return 400, "bad_request"


def register_error_handlers(app: FastAPI) -> None:
    """One handler for the dock's errors; request validation and routing errors keep the same body."""

    @app.exception_handler(DockError)
    async def _dock_error(_request: Request, exc: DockError) -> JSONResponse:
        status, code = status_and_code(exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(error_body(code, str(exc)), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else str(first.get("msg", ""))
        details = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors
        ]
        return JSONResponse(error_body("validation_error", message, details=details), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return JSONResponse(
            error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers
        )
