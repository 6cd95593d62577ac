"""The authentication dependencies: ``CurrentKey`` and role-restricted aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.api.deps import SessionDep
from app.auth import service
from app.db.models import ApiKey, Role

_bearer = HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer pdk_…`")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="an API key: `X-API-Key: pdk_…`")


def current_key(
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> ApiKey:
    token = bearer.credentials if bearer is not None else header
    return service.authenticate(session, token)


CurrentKey = Annotated[ApiKey, Depends(current_key)]


def developer_key(key: CurrentKey) -> ApiKey:
    return service.require_role(key, Role.developer, Role.admin)


def admin_key(key: CurrentKey) -> ApiKey:
    return service.require_role(key, Role.admin)


DeveloperKey = Annotated[ApiKey, Depends(developer_key)]
AdminKey = Annotated[ApiKey, Depends(admin_key)]
