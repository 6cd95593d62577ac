"""Liveness, readiness and metrics endpoints (no key needed: probes and scrapers call them)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from app.api.deps import RuntimeDep
from app.db.migrate import current_revision, head_revision
from app.health import collector
from app.runtime import Runtime

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


def _check(name: str, fn: Any, results: dict[str, Any]) -> bool:
    started = time.perf_counter()
    try:
        detail = fn()
    except Exception as exc:
        results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return False
    results[name] = {"ok": True, "ms": round(1000 * (time.perf_counter() - started), 1), **(detail or {})}
    return True


def readiness(runtime: Runtime) -> tuple[bool, dict[str, Any]]:
    results: dict[str, Any] = {}

    def database() -> dict[str, Any]:
        runtime.db.ping()
        current, head = current_revision(runtime.db.engine), head_revision(runtime.db.url)
        if current != head:
            raise RuntimeError(f"schema at {current}, migrations at {head}: run `pavedock db upgrade`")
        return {"revision": current}

    def broker() -> dict[str, Any]:
        with runtime.celery.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            # The driver, not the class: the embedded broker is kombu's filesystem transport,
            # subclassed (workers/broker.py); Redis is "redis".
            return {"transport": str(conn.transport.driver_type)}

    def store() -> dict[str, Any]:
        runtime.store.ping()
        return {}

    def index() -> dict[str, Any]:
        info = runtime.indexes.status(runtime.default_space_id)
        return {
            "engine": runtime.indexes.name,
            "space": info.space_id,
            "size": info.size,
            "version": info.version,
            "source": info.source,
        }

    ok = all(
        [
            _check("database", database, results),
            _check("broker", broker, results),
            _check("store", store, results),
        ]
    )
    ok = _check("index", index, results) and ok
    return ok, results


@router.get("/readyz")
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Ready when the database (at the latest migration), the broker, the store and the index are."""
    ok, results = await run_in_threadpool(readiness, runtime)
    return JSONResponse(
        {"status": "ready" if ok else "unavailable", "checks": results}, status_code=200 if ok else 503
    )


@router.get("/metrics", response_class=Response)
async def prometheus_metrics(runtime: RuntimeDep) -> Response:
    """Prometheus text format: requests, jobs, queues, learnwares, indexes."""
    body = await run_in_threadpool(collector.render, runtime)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
