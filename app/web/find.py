"""Find a model for my task: few labelled examples in, a task and its progress, the ranked
learnwares, then reuse (fine-tune the best adapter, merge the top ones) followed live until the
result is the user's own learnware."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.api.deps import RuntimeDep, SessionDep
from app.api.errors import status_and_code
from app.api.uploads import saved_upload
from app.db.models import ApiKey, Job, JobState, Learnware, TaskStatus, UserTask
from app.errors import PayloadTooLarge
from app.jobs.service import get_visible_job
from app.ml.errors import DockError
from app.reuse import service as reuse
from app.reuse.schemas import TaskReuseCreate
from app.runtime import Runtime
from app.tasks import service as tasks
from app.tasks.schemas import TaskCreate
from app.web import shots
from app.web.errors import FieldError
from app.web.render import WebRoute, page
from app.web.session import CsrfChecked, SignedIn

router = APIRouter(route_class=WebRoute, include_in_schema=False)

MAX_SHOTS_FILE = 4 * 1024 * 1024
TOP_K = 10
MERGE_CHOICES = (0, 2, 3, 4)


def _field_of(exc: DockError) -> str:
    if isinstance(exc, FieldError):
        return exc.field
    message = str(exc)
    return "label_names" if "label name" in message else "examples"


def _validation_field(exc: ValidationError) -> tuple[str, str]:
    first = exc.errors()[0]
    where = str(first["loc"][0]) if first.get("loc") else "examples"
    field = {"texts": "examples", "labels": "examples"}.get(where, where)
    return field, f"{where}: {first['msg']}" if where not in ("texts",) else str(first["msg"])


async def _read_examples(examples: str, upload: UploadFile | None) -> tuple[str, str]:
    """The pasted text, or the uploaded file's (decoded), and the file name."""
    if upload is not None and upload.filename:
        data = await upload.read(MAX_SHOTS_FILE + 1)
        if len(data) > MAX_SHOTS_FILE:
            raise PayloadTooLarge(f"the examples file is over the limit of {MAX_SHOTS_FILE} bytes")
        return shots.decode(data), upload.filename
    return examples, ""


def _examples_jsonl(parsed: shots.Shots) -> str:
    return "\n".join(
        json.dumps({"text": t, "label": y}, ensure_ascii=False)
        for t, y in zip(parsed.texts, parsed.labels, strict=True)
    )


@router.get("/find")
def find_form(request: Request, key: SignedIn) -> Response:
    return page(request, "find.html", {"title": "Find a model for my task", "form": {}, "errors": {}})


@router.post("/find", dependencies=[CsrfChecked])
async def find(
    request: Request,
    key: SignedIn,
    db: SessionDep,
    runtime: RuntimeDep,
    examples: Annotated[str, Form(max_length=2_000_000)] = "",
    label_names: Annotated[str, Form(max_length=20_000)] = "",
    file: Annotated[UploadFile | None, File()] = None,
) -> Response:
    """Parse the examples, post the task through the task service, show its page."""
    form = {"examples": examples, "label_names": label_names}
    try:
        text, filename = await _read_examples(examples, file)
        parsed = shots.parse(
            text, label_names=label_names, filename=filename, max_examples=runtime.settings.max_task_examples
        )
        body = TaskCreate(
            texts=parsed.texts, labels=parsed.labels, label_names=parsed.label_names, top_k=TOP_K
        )
        task, _job = tasks.create_few_shot(db, runtime, key, body)
    except (DockError, ValidationError) as exc:
        db.rollback()  # nothing half-stored
        if isinstance(exc, ValidationError):
            field, message = _validation_field(exc)
        else:
            field, message = _field_of(exc), str(exc)
        status = status_and_code(exc)[0] if isinstance(exc, DockError) else 422
        context = {"title": "Find a model for my task", "form": form, "errors": {field: message}}
        return page(request, "find.html", context, status_code=status)
    db.commit()  # the job is enqueued once committed; the page below polls it
    response = _task_page(request, db, runtime, key, task, examples=_examples_jsonl(parsed))
    response.headers["HX-Push-Url"] = f"/tasks/{task.id}"
    return response


@router.post("/find/spec", dependencies=[CsrfChecked])
def find_by_spec(
    request: Request,
    key: SignedIn,
    db: SessionDep,
    runtime: RuntimeDep,
    spec: Annotated[UploadFile | None, File()] = None,
    spec_label_names: Annotated[str, Form(max_length=20_000)] = "",
) -> Response:
    """A task given as a spec fitted on the user's machine: the examples never reach the dock."""
    form = {"spec_label_names": spec_label_names}
    settings = runtime.settings
    try:
        if spec is None or not spec.filename:
            raise FieldError("choose the task spec's .safetensors file", "spec")
        names = [n.strip() for n in spec_label_names.split(",") if n.strip()]
        with saved_upload(
            spec,
            settings.scratch_dir,
            max_bytes=settings.max_spec_upload_bytes,
            what="spec",
            filename="spec.safetensors",
        ) as path:
            assert path is not None
            task, _job = tasks.create_from_spec(db, runtime, key, path, TOP_K, names)
    except DockError as exc:
        db.rollback()
        field = exc.field if isinstance(exc, FieldError) else "spec"
        context = {"title": "Find a model for my task", "form": form, "errors": {field: str(exc)}}
        return page(request, "find.html", context, status_code=status_and_code(exc)[0])
    db.commit()
    response = _task_page(request, db, runtime, key, task)
    response.headers["HX-Push-Url"] = f"/tasks/{task.id}"
    return response


def _matches(db: Session, task: UserTask) -> list[dict[str, Any]]:
    out = []
    for match in task.results or []:
        learnware = db.get(Learnware, int(match["learnware_id"]))
        covered = sorted(
            {n.casefold() for n in task.label_names} & {n.casefold() for n in match.get("label_names", [])}
        )
        out.append(
            {
                **match,
                "description": learnware.description if learnware else "",
                "base_model": learnware.base_model if learnware else None,
                "covered": covered,
                "reusable": bool(learnware and learnware.model_format == "peft-lora"),
            }
        )
    return out


def _task_context(db: Session, task: UserTask) -> dict[str, Any]:
    job_id = tasks.repository.latest_job_id(db, task.id)
    job = db.get(Job, job_id) if job_id else None
    return {
        "task": task,
        "job": job,
        "matches": _matches(db, task) if task.status == TaskStatus.ready else [],
        "running": task.status in (TaskStatus.pending, TaskStatus.running),
    }


def _task_page(
    request: Request,
    db: Session,
    runtime: Runtime,
    key: ApiKey,
    task: UserTask,
    *,
    examples: str = "",
    form: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    context = {
        **_task_context(db, task),
        "title": f"Task {task.id}",
        "form": form or {"examples": examples, "label_names": ", ".join(task.label_names), "steps": 30},
        "errors": errors or {},
        "merge_choices": MERGE_CHOICES,
    }
    return page(request, "task.html", context, status_code=status_code)


@router.get("/tasks/{task_id}")
def task_page(request: Request, task_id: int, key: SignedIn, db: SessionDep, runtime: RuntimeDep) -> Response:
    """A task's progress and ranking: its owner's alone (403 for any other key, admins too)."""
    return _task_page(request, db, runtime, key, tasks.get_owned(db, key, task_id))


@router.get("/tasks/{task_id}/progress")
def task_progress(request: Request, task_id: int, key: SignedIn, db: SessionDep) -> Response:
    """The part of the task page that changes, polled while the task is pending or running."""
    task = tasks.get_owned(db, key, task_id)
    response = page(request, "_task_progress.html", _task_context(db, task))
    if task.status == TaskStatus.ready and request.headers.get("HX-Request") == "true":
        response.headers["HX-Trigger"] = "task-ranked"
    return response


@router.post("/tasks/{task_id}/reuse", dependencies=[CsrfChecked])
async def task_reuse(
    request: Request,
    task_id: int,
    key: SignedIn,
    db: SessionDep,
    runtime: RuntimeDep,
    examples: Annotated[str, Form(max_length=2_000_000)] = "",
    label_names: Annotated[str, Form(max_length=20_000)] = "",
    file: Annotated[UploadFile | None, File()] = None,
    finetune: Annotated[str, Form()] = "",
    merge_k: Annotated[str, Form()] = "0",
    steps: Annotated[str, Form()] = "30",
) -> Response:
    """Fine-tune the task's best adapter on the examples and/or merge its top ones (both private)."""
    task = tasks.get_owned(db, key, task_id)
    form = {
        "examples": examples,
        "label_names": label_names,
        "steps": steps,
        "finetune": bool(finetune),
        "merge_k": merge_k,
    }
    try:
        try:
            n_steps = int(steps)
        except ValueError:
            raise FieldError(f"steps must be a whole number, not {steps!r}", "steps") from None
        try:
            k = int(merge_k)
        except ValueError:
            raise FieldError(f"merge must be one of {MERGE_CHOICES}", "merge_k") from None
        text, filename = await _read_examples(examples, file)
        parsed = shots.parse(
            text, label_names=label_names, filename=filename, max_examples=runtime.settings.max_task_examples
        )
        try:
            body = TaskReuseCreate(
                texts=parsed.texts,
                labels=parsed.labels,
                label_names=parsed.label_names,
                finetune=bool(finetune),
                finetune_steps=n_steps,
                merge_k=k,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = str(first["loc"][0]) if first.get("loc") else "examples"
            field = {"finetune_steps": "steps", "texts": "examples", "labels": "examples"}.get(where, where)
            raise FieldError(f"{field.replace('_', ' ')}: {first['msg']}", field) from None
        submitted = reuse.create_task_reuse(db, runtime, key, task.id, body)
    except DockError as exc:
        db.rollback()
        field = _field_of(exc) if isinstance(exc, FieldError) else "reuse"
        return _task_page(
            request,
            db,
            runtime,
            key,
            task,
            form=form,
            errors={field: str(exc)},
            status_code=status_and_code(exc)[0],
        )
    db.commit()
    job_ids = [c.job_id for c in (submitted.finetune, submitted.merge) if c is not None]
    context = {
        "title": f"Reusing task {task.id}'s learnwares",
        "task": task,
        "submitted": submitted,
        "jobs": [db.get(Job, i) for i in job_ids],
    }
    return page(request, "reuse.html", context, status_code=202)


def _job_context(db: Session, key: ApiKey, job: Job) -> dict[str, Any]:
    """A job, and for a reuse job that succeeded, the job that validates its learnware and the
    learnware itself, so one panel follows it until it is ready."""
    result = job.result or {}
    ingest = None
    learnware = None
    if job.state == JobState.succeeded and "ingest_job_id" in result:
        ingest = get_visible_job(db, int(result["ingest_job_id"]), key)
        learnware = db.get(Learnware, int(result["learnware_id"]))
    finished = job.state in (JobState.failed, JobState.cancelled) or (
        job.state == JobState.succeeded
        and (ingest is None or ingest.state not in (JobState.queued, JobState.running))
    )
    return {"job": job, "ingest": ingest, "made": learnware, "finished": finished, "result": result}


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: int, key: SignedIn, db: SessionDep) -> Response:
    job = get_visible_job(db, job_id, key)
    return page(request, "job.html", {**_job_context(db, key, job), "title": f"Job {job.id}"})


@router.get("/jobs/{job_id}/progress")
def job_progress(request: Request, job_id: int, key: SignedIn, db: SessionDep) -> Response:
    job = get_visible_job(db, job_id, key)
    return page(request, "_job_progress.html", _job_context(db, key, job))
