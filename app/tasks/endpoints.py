"""User task endpoints: post a few-shot task or a task spec, read your tasks, rank a spec now."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Form, Query

from app.api.deps import RuntimeDep, SessionDep
from app.api.responses import errors
from app.api.types import PageQuery, PathId, find_unstorable
from app.api.uploads import SpecFile
from app.auth.dependencies import CurrentKey
from app.errors import InvalidInput
from app.spec_spaces import service as spaces
from app.tasks import repository, service
from app.tasks.schemas import IdentifyResult, TaskCreate, TaskRead, TaskSubmitted

router = APIRouter(responses=errors(401), tags=["tasks"])


@router.post("/v1/tasks", responses=errors(422), response_model=TaskSubmitted, status_code=202)
def post_task(body: TaskCreate, key: CurrentKey, session: SessionDep, runtime: RuntimeDep) -> TaskSubmitted:
    """Post a few-shot task (texts, labels, label names); a job fits its spec and ranks learnwares."""
    task, job = service.create_few_shot(session, runtime, key, body)
    return TaskSubmitted(task_id=task.id, job_id=job.id, status=task.status)


@router.post("/v1/tasks/spec", responses=errors(413, 422), response_model=TaskSubmitted, status_code=202)
def post_task_spec(
    key: CurrentKey,
    session: SessionDep,
    runtime: RuntimeDep,
    spec: SpecFile,
    top_k: Annotated[int, Form(ge=1, le=100)] = 10,
    label_names: Annotated[str, Form(description="JSON list of the task's class names (optional)")] = "[]",
) -> TaskSubmitted:
    """Post a task as a spec computed on your machine: your examples never leave it."""
    try:
        names = json.loads(label_names)
    except ValueError as exc:
        raise InvalidInput(f"label_names is not JSON: {exc}") from exc
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidInput("label_names must be a JSON list of strings")
    problem = find_unstorable(names, "label_names")
    if problem:
        raise InvalidInput(problem)
    task, job = service.create_from_spec(session, runtime, key, spec, top_k, names)
    return TaskSubmitted(
        task_id=task.id,
        job_id=job.id,
        status=task.status,
        spec_stored=spaces.stored_encoding(session, task.spec_id),
    )


@router.get("/v1/tasks", responses=errors(422), response_model=list[TaskRead])
def list_tasks(
    key: CurrentKey,
    session: SessionDep,
    page: PageQuery = 1,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> list[TaskRead]:
    """Your tasks, newest first."""
    rows = repository.owned_by(session, key.id, offset=(page - 1) * limit, limit=limit)
    return [service.to_read(session, t) for t in rows]


@router.get("/v1/tasks/{task_id}", responses=errors(403, 404, 422), response_model=TaskRead)
def get_task(task_id: PathId, key: CurrentKey, session: SessionDep) -> TaskRead:
    """A task's status and its learnwares ranked by score (its owner only)."""
    return service.to_read(session, service.get_owned(session, key, task_id))


@router.post("/v1/identify", responses=errors(413, 422), response_model=IdentifyResult)
def identify(
    key: CurrentKey,
    session: SessionDep,
    runtime: RuntimeDep,
    spec: SpecFile,
    k: Annotated[int, Form(ge=1, le=100)] = 10,
) -> IdentifyResult:
    """Rank learnwares for a spec in this request, from this API process's index (nothing stored)."""
    return service.identify_now(session, runtime, spec, k)
