"""Reuse endpoints: merge learnwares, fine-tune one on your shots, transfer one to another base,
and reuse what a task identified."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import RuntimeDep, SessionDep
from app.api.responses import errors
from app.api.types import PathId
from app.auth.dependencies import CurrentKey
from app.reuse import service
from app.reuse.schemas import (
    FinetuneCreate,
    MergeCreate,
    MergeMethodRead,
    ReuseSubmitted,
    TaskReuseCreate,
    TaskReuseSubmitted,
    TransferCreate,
)

router = APIRouter(responses=errors(401), tags=["reuse"])


@router.get("/v1/merge-methods", response_model=list[MergeMethodRead])
def merge_methods(key: CurrentKey) -> list[MergeMethodRead]:
    """The merge methods and the JSON Schema of each one's parameters (PACT's included)."""
    return service.merge_methods()


@router.post(
    "/v1/merges", responses=errors(403, 404, 409, 422), response_model=ReuseSubmitted, status_code=202
)
def post_merge(
    body: MergeCreate, key: CurrentKey, session: SessionDep, runtime: RuntimeDep
) -> ReuseSubmitted:
    """Merge LoRA learnwares of one base into a new learnware; the job's result names it."""
    job = service.create_merge(session, runtime, key, body)
    return ReuseSubmitted(job_id=job.id, kind=job.kind)


@router.post(
    "/v1/finetunes", responses=errors(403, 404, 409, 422), response_model=ReuseSubmitted, status_code=202
)
def post_finetune(
    body: FinetuneCreate, key: CurrentKey, session: SessionDep, runtime: RuntimeDep
) -> ReuseSubmitted:
    """Fine-tune a LoRA learnware on your shots (PAVE♦); held-out accuracy before and after in the result."""
    job = service.create_finetune(session, runtime, key, body)
    return ReuseSubmitted(job_id=job.id, kind=job.kind)


@router.post(
    "/v1/transfers", responses=errors(403, 404, 409, 422), response_model=ReuseSubmitted, status_code=202
)
def post_transfer(
    body: TransferCreate, key: CurrentKey, session: SessionDep, runtime: RuntimeDep
) -> ReuseSubmitted:
    """Move a LoRA learnware onto another registered base: BiCo and its baselines yield a LoRA
    adapter of the target, UTD a linear map after the target's pooling (``pooled-linear``)."""
    job = service.create_transfer(session, runtime, key, body)
    return ReuseSubmitted(job_id=job.id, kind=job.kind)


@router.post(
    "/v1/tasks/{task_id}/reuse",
    responses=errors(403, 404, 409, 422),
    response_model=TaskReuseSubmitted,
    status_code=202,
)
def post_task_reuse(
    task_id: PathId, body: TaskReuseCreate, key: CurrentKey, session: SessionDep, runtime: RuntimeDep
) -> TaskReuseSubmitted:
    """Identify, then reuse: fine-tune the task's top adapter (PAVE♦) and merge its top k into your
    private learnwares; each job's result gives its held-out accuracy beside the top-1's as it is."""
    return service.create_task_reuse(session, runtime, key, task_id, body)
