"""The dock's error family, in one place: the ML core's (``app.ml.errors``: bad input, bad
packages, incompatible specs) and the service's own (keys, access, missing resources, state).

Services raise these; ``app.api.errors`` maps each class to an HTTP status and body.
"""

from __future__ import annotations

from app.ml.errors import (
    DockError,
    IncompatibleSpec,
    InputError,
    InvalidInput,
    InvalidPackage,
    UnknownBase,
    UnsafePackage,
)

__all__ = [
    "Conflict",
    "DockError",
    "Forbidden",
    "IncompatibleSpec",
    "InputError",
    "InvalidInput",
    "InvalidPackage",
    "NotFound",
    "PayloadTooLarge",
    "ServiceUnavailable",
    "Unauthorized",
    "UnknownBase",
    "UnsafePackage",
    "VectorEngineUnavailable",
]


class Unauthorized(DockError):
    """No API key, an unknown one, a revoked one or an expired one."""


class Forbidden(DockError):
    """The key's role or ownership does not allow this."""


class NotFound(DockError):
    """No such resource (or not visible to this key)."""


class Conflict(DockError):
    """The request conflicts with the current state (a duplicate, a finished job)."""


class PayloadTooLarge(DockError):
    """An upload over the configured limit."""


class ServiceUnavailable(DockError):
    """A dependency (database, broker, store) cannot be reached."""


class VectorEngineUnavailable(ServiceUnavailable, ConnectionError):
    """The shared vector engine cannot be reached: for the API a 503 with the reason, for the job
    runner a transient error (a ``ConnectionError``: the stage is retried after a back-off)."""
