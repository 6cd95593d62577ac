"""The admin dashboard: the ``/admin`` page and its read endpoints under ``/v1/admin/``.

The page is signed in as the market's pages are (``app.web.session``): a visitor without a
session is sent to ``/signin`` and back; a browser signed in with another role's key gets a 403
page; an admin gets the page, which holds no data. Its script calls the JSON endpoints (these,
and the dock's own admin actions it calls, need an admin key) with the session cookie, never a
key, and sends the session's CSRF token (a ``<meta>`` of the page) as ``X-CSRF-Token`` with
every action. A request for the page that carries a non-admin key in a header gets 403 too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Security
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.templating import Jinja2Templates

from app.admin import service
from app.admin.monitor import AdminMonitor, RequestHistory, WorkerInspector
from app.admin.schemas import Charts, Overview
from app.api.deps import RuntimeDep, SessionDep
from app.api.responses import errors
from app.auth.dependencies import AdminKey
from app.auth.service import authenticate, require_role
from app.db.models import Role
from app.errors import NotFound
from app.runtime import Runtime
from app.settings import Settings
from app.web.render import refuse_signed_in_non_admin
from app.web.session import CSRF_FIELD, cookie_key, get_codec

HERE = Path(__file__).parent
STATIC = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")
SIGN_IN = "/signin?next=%2Fadmin"
_ASSETS = {"admin.js": "text/javascript", "admin.css": "text/css", "favicon.svg": "image/svg+xml"}
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


@dataclass
class AdminState:
    settings: Settings
    monitor: AdminMonitor


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the request sampler and the worker inspector with the app; stop them with it."""
    runtime: Runtime = app.state.runtime
    settings = runtime.settings
    monitor = AdminMonitor(
        RequestHistory(settings.admin_history_samples),
        WorkerInspector(
            runtime.celery,
            timeout_s=settings.worker_inspect_timeout_s,
            interval_s=settings.worker_inspect_interval_s,
        ),
        settings.admin_sample_interval_s,
    )
    app.state.admin = AdminState(settings, monitor)
    monitor.start()
    try:
        yield
    finally:
        monitor.stop()


def get_admin_state(request: Request) -> AdminState:
    state: AdminState = request.app.state.admin
    return state


AdminStateDep = Annotated[AdminState, Depends(get_admin_state)]

_bearer = HTTPBearer(auto_error=False)
_header = APIKeyHeader(name="X-API-Key", auto_error=False)


def refuse_other_roles(
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> None:
    """A key sent with the page or its assets in a header must be an admin's."""
    token = bearer.credentials if bearer is not None else header
    if token:
        require_role(authenticate(session, token), Role.admin)


router = APIRouter(responses=errors(401), tags=["admin"], lifespan=lifespan)
pages = APIRouter(include_in_schema=False, dependencies=[Depends(refuse_other_roles)])


@pages.get("/admin", response_class=HTMLResponse)
def admin_page(request: Request, session: SessionDep) -> Response:
    key = cookie_key(request, session)
    if key is None:
        return RedirectResponse(SIGN_IN, status_code=303, headers={"Cache-Control": "no-store"})
    refused = refuse_signed_in_non_admin(request, key)
    if refused is not None:
        return refused
    csrf = get_codec(request).csrf(request.state.web_session)
    return templates.TemplateResponse(
        request,
        "admin.html",
        {"key": key, "csrf": csrf, "csrf_field": CSRF_FIELD},
        headers=_PAGE_HEADERS,
    )


@pages.get("/admin/static/{name}")
def admin_asset(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no admin asset {name}")
    return Response(
        (STATIC / name).read_bytes(),
        media_type=media_type,
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


@router.get("/v1/admin/overview", responses=errors(403), response_model=Overview)
def overview(_admin: AdminKey, session: SessionDep, runtime: RuntimeDep, admin: AdminStateDep) -> Overview:
    """Queues, job counts, workers and what they run, indexes, the review queue (admin only)."""
    return service.overview(session, runtime, admin.monitor.inspector.report(), admin.settings.flower_url)


@router.get("/v1/admin/charts", responses=errors(403, 422), response_model=Charts)
def charts(
    _admin: AdminKey,
    session: SessionDep,
    admin: AdminStateDep,
    minutes: Annotated[int, Query(ge=5, le=1440, description="the window, ending now")] = 60,
) -> Charts:
    """Jobs ended per interval and their run times; API requests per second and latency (admin only)."""
    return service.charts(session, admin.monitor.history, minutes=minutes)


router.include_router(pages)
