"""The FastAPI app: ``create_app()`` for uvicorn (``app.main:create_app --factory``) and tests:
the composition root that reaches every domain's router."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.middleware.cors import CORSMiddleware

from app.admin import endpoints as admin
from app.api.errors import register_error_handlers
from app.api.limits import BodySizeLimit
from app.api.metrics import RequestMetrics
from app.auth import endpoints as keys
from app.errors import ServiceUnavailable
from app.health import endpoints as health
from app.jobs import endpoints as jobs
from app.jobs.reaper import Reaper
from app.learnwares import endpoints as learnwares
from app.reuse import endpoints as reuse
from app.runtime import Runtime
from app.settings import Settings, get_settings
from app.spec_spaces import endpoints as spec_spaces
from app.spec_spaces.service import register_spaces
from app.tasks import endpoints as tasks
from app.web.router import router as web_pages
from app.web.session import api_session_key

log = logging.getLogger(__name__)

DESCRIPTION = """
PAVE Dock: a learnware dock. Developers submit learnwares (model + PAVE specification);
users post few-shot tasks and get learnwares ranked by the cosine of their specs.

Authenticate with an API key: `Authorization: Bearer pdk_…` or `X-API-Key: pdk_…`.
A browser signed in on the web pages (`/signin`) is authenticated by its session cookie instead
(same origin only; a request that changes something also sends the session's `X-CSRF-Token`).
Errors have one body: `{"error": {"code": "...", "message": "..."}}`.
"""


def _startup(runtime: Runtime) -> None:
    with runtime.db.session() as session:
        register_spaces(session, runtime.settings)
    try:
        info = runtime.indexes.status(runtime.default_space_id)
    except ServiceUnavailable as exc:  # the API serves what it can; /readyz and searches say why
        log.warning("index %s not ready: %s", runtime.default_space_id, exc)
        return
    log.info(
        "index %s ready (%s): %d specs (version %d, from %s)",
        info.space_id,
        runtime.indexes.name,
        info.size,
        info.version,
        info.source,
    )


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The dock's API. Give ``runtime`` to share one (tests), else it is built from ``settings``."""
    settings = settings or (runtime.settings if runtime else get_settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = runtime is None
        rt = runtime or Runtime.create(settings, persist_index=True)
        app.state.runtime = rt
        await run_in_threadpool(_startup, rt)
        reaper = Reaper(rt)
        reaper.start()
        try:
            yield
        finally:
            reaper.stop()
            if own:
                await run_in_threadpool(rt.close)
            else:
                await run_in_threadpool(rt.indexes.save_all)

    app = FastAPI(
        title="PAVE Dock",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_tags=[
            {"name": "learnwares", "description": "submit, list, download and delete learnwares"},
            {"name": "tasks", "description": "few-shot tasks and their ranked learnwares"},
            {"name": "reuse", "description": "merge, fine-tune and transfer learnwares into new ones"},
            {"name": "jobs", "description": "background jobs: state, progress, logs"},
            {"name": "spec spaces", "description": "what a client needs to compute a compatible spec"},
            {"name": "keys", "description": "API keys"},
            {"name": "health", "description": "probes and metrics"},
        ],
    )
    if runtime is not None:
        app.state.runtime = runtime
    # The API accepts the pages' session cookie as the key (the admin dashboard calls it so).
    app.state.session_key_resolver = api_session_key
    register_error_handlers(app)
    for router in (
        learnwares.router,
        tasks.router,
        reuse.router,
        jobs.router,
        spec_spaces.router,
        keys.router,
        health.router,
        admin.router,
        web_pages,
    ):
        app.include_router(router)
    app.add_middleware(
        BodySizeLimit,
        default=max(16 * 1024 * 1024, settings.max_spec_upload_bytes * 2),
        routes={
            ("POST", "/v1/learnwares"): settings.max_upload_bytes + settings.max_spec_upload_bytes + 65536,
            ("POST", "/submit"): settings.max_upload_bytes + settings.max_spec_upload_bytes + 65536,
        },
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(RequestMetrics)
    return app
