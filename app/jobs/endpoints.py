"""Job endpoints: read a job, follow its progress as server-sent events, cancel; admins list
and retry jobs and rebuild indexes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from app.api.deps import RuntimeDep, SessionDep
from app.api.responses import errors
from app.api.types import OffsetQuery, PathId, PathText, TextQuery
from app.auth.dependencies import AdminKey, CurrentKey
from app.db.models import Job, JobState
from app.jobs import service
from app.jobs.schemas import JobPage, JobRead, JobSubmitted
from app.jobs.stages import REBUILD_INDEX
from app.spec_spaces.service import get_space

router = APIRouter(responses=errors(401), tags=["jobs"])

_POLL_FIRST_S = 0.1
_POLL_S = 0.5
_POLL_FAST_FOR_S = 10.0
_KEEPALIVE_S = 15.0


def poll_interval(followed_s: float) -> float:
    """How long the event stream waits before reading the job again, ``followed_s`` into it: a
    tenth of a second at first, so a few-shot task that takes two seconds reaches its user within
    0.1 s of its end rather than within half a second, growing to half a second over the first ten
    seconds, so a merge followed for minutes costs the database two reads a second."""
    share = min(1.0, max(0.0, followed_s) / _POLL_FAST_FOR_S)
    return _POLL_FIRST_S + (_POLL_S - _POLL_FIRST_S) * share


@router.get("/v1/jobs/{job_id}", responses=errors(403, 404, 422), response_model=JobRead)
def get_job(job_id: PathId, key: CurrentKey, session: SessionDep) -> JobRead:
    """A job's state, stage, progress, log, result or error (its owner or an admin)."""
    return JobRead.model_validate(service.get_visible_job(session, job_id, key))


@router.get(
    "/v1/jobs/{job_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "`job` events until the job ends"},
        **errors(403, 404, 422),
    },
)
def stream_job(
    job_id: PathId, key: CurrentKey, session: SessionDep, runtime: RuntimeDep, request: Request
) -> StreamingResponse:
    """Server-sent events: a ``job`` event (the JobRead JSON) at every change, until it ends."""
    service.get_visible_job(session, job_id, key)

    def snapshot() -> JobRead | None:
        with runtime.db.session() as own:
            job = own.get(Job, job_id)
            return JobRead.model_validate(job) if job else None

    async def events() -> AsyncIterator[bytes]:
        last: tuple[object, ...] | None = None
        idle = followed = 0.0
        while not await request.is_disconnected():
            job = await run_in_threadpool(snapshot)
            if job is None:
                return
            marker = (job.state, job.stage, job.progress, job.message, len(job.log), job.attempts)
            if marker != last:
                last, idle = marker, 0.0
                yield f"event: job\nid: {job.id}-{len(job.log)}\ndata: {job.model_dump_json()}\n\n".encode()
                if job.state in service.TERMINAL:
                    return
            elif idle >= _KEEPALIVE_S:
                idle = 0.0
                yield b": keep-alive\n\n"
            wait = poll_interval(followed)
            await asyncio.sleep(wait)
            idle += wait
            followed += wait

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.post("/v1/jobs/{job_id}/cancel", responses=errors(403, 404, 409, 422), response_model=JobRead)
def cancel_job(job_id: PathId, key: CurrentKey, session: SessionDep) -> JobRead:
    """Cancel a queued or running job (its owner or an admin)."""
    return JobRead.model_validate(service.cancel_job(session, job_id, key))


@router.get("/v1/admin/jobs", responses=errors(403, 422), response_model=JobPage)
def list_jobs(
    _admin: AdminKey,
    session: SessionDep,
    state: JobState | None = None,
    kind: TextQuery = None,
    offset: OffsetQuery = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JobPage:
    """Jobs, newest first, filtered by state and kind (admin only)."""
    rows, total = service.list_jobs(session, state=state, kind=kind, offset=offset, limit=limit)
    return JobPage(items=[JobRead.model_validate(j) for j in rows], total_count=total)


@router.post("/v1/admin/jobs/{job_id}/retry", responses=errors(403, 404, 409, 422), response_model=JobRead)
def retry_job(job_id: PathId, admin: AdminKey, session: SessionDep) -> JobRead:
    """Run a failed or cancelled job again from the stage where it stopped (admin only)."""
    return JobRead.model_validate(service.retry_job(session, job_id, admin))


@router.post(
    "/v1/admin/spec-spaces/{space_id}/rebuild",
    responses=errors(403, 404, 422),
    response_model=JobSubmitted,
    status_code=202,
)
def rebuild_index(
    space_id: PathText, admin: AdminKey, session: SessionDep, runtime: RuntimeDep
) -> JobSubmitted:
    """Rebuild a space's index from the specs in the database, in a worker (admin only)."""
    record = get_space(session, space_id)
    job = service.create_job(
        session,
        kind="index.rebuild",
        first_stage=REBUILD_INDEX,
        owner=admin,
        max_attempts=runtime.settings.job_max_attempts,
        space_id=record.id,
    )
    return JobSubmitted(job_id=job.id)
