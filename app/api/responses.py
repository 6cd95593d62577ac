"""The error responses each route documents in the OpenAPI, with the one error body they share.

``errors(404, 409)`` gives a route's ``responses=``; every route with an API key also lists 401
(and 403 where a role or an owner is checked), and every route with parameters lists 422, whose
body is the dock's, not FastAPI's default.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    code: str = Field(description="stable and machine-readable, e.g. not_found, validation_error")
    message: str = Field(description="what went wrong, naming the field or the resource")
    details: list[dict[str, Any]] | None = Field(
        default=None, description="validation errors only: each with its loc, msg and type"
    )


class ErrorBody(BaseModel):
    """Every error the dock answers has this body."""

    error: ErrorDetail


WHAT = {
    401: "no API key, or an unknown, revoked or expired one",
    403: "the key's role or ownership does not allow this",
    404: "no such resource, or one this key may not see",
    409: "the request conflicts with the resource's state (a duplicate, a finished job, not ready)",
    413: "an upload over the configured limit",
    422: "invalid input: the message names the field and the reason",
    503: "a dependency (database, broker, store) cannot be reached",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route answering these error statuses."""
    return {status: {"model": ErrorBody, "description": WHAT[status]} for status in statuses}
