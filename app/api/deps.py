"""Dependency aliases shared by the routers: ``RuntimeDep``, ``SessionDep``, ``SettingsDep``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.runtime import Runtime
from app.settings import Settings


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_session(runtime: RuntimeDep) -> Iterator[Session]:
    """One unit of work per request: committed when the endpoint returns, before the response is
    sent (so a 202's job exists and is enqueued), rolled back on any error."""
    with runtime.db.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
