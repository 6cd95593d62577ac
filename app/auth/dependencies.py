"""The authentication dependencies: ``CurrentKey`` and role-restricted aliases.

An API client sends its key in a header. A browser signed in on the web pages sends no key: it
holds a session cookie, and the app factory installs on ``app.state.session_key_resolver`` the
function that turns that cookie into its key (``app.web.session.api_session_key``; this package
knows cookies only by name, so that sessions stay the pages' business). A header key, when
sent, always wins over the cookie.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyCookie, APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.api.deps import SessionDep
from app.auth import service
from app.db.models import ApiKey, Role

SESSION_COOKIE = "pavedock_session"

SessionKeyResolver = Callable[[Request, Session, str], ApiKey | None]
"""``(request, db, cookie) -> key``: the key of the signed-in browser session in ``cookie``, or
None (no valid session: the request is then as one without a key); raises Forbidden for a
request the session may not make (an unsafe method without its CSRF token)."""

_bearer = HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer pdk_…`")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="an API key: `X-API-Key: pdk_…`")
_cookie = APIKeyCookie(
    name=SESSION_COOKIE,
    auto_error=False,
    description=(
        "a browser's session after signing in on the web pages (`/signin`): httpOnly and "
        "`SameSite=Strict`, accepted from this origin only; POST, PUT, PATCH and DELETE also "
        "need the session's `X-CSRF-Token` header. A key in a header takes precedence."
    ),
)


def current_key(
    request: Request,
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
    cookie: Annotated[str | None, Security(_cookie)],
) -> ApiKey:
    token = bearer.credentials if bearer is not None else header
    if not token and cookie:
        resolver: SessionKeyResolver | None = getattr(request.app.state, "session_key_resolver", None)
        key = resolver(request, session, cookie) if resolver is not None else None
        if key is not None:
            return service.touch(key)
    return service.authenticate(session, token)


CurrentKey = Annotated[ApiKey, Depends(current_key)]


def developer_key(key: CurrentKey) -> ApiKey:
    return service.require_role(key, Role.developer, Role.admin)


def admin_key(key: CurrentKey) -> ApiKey:
    return service.require_role(key, Role.admin)


DeveloperKey = Annotated[ApiKey, Depends(developer_key)]
AdminKey = Annotated[ApiKey, Depends(admin_key)]
