"""Reuse requests are checked in the request (learnwares visible, ready, LoRA adapters of one
base; method and parameters known), then a job does the work (``pipeline``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.db.models import ApiKey, Job, Learnware, LearnwareStatus, Role, TaskStatus, UserTask
from app.errors import Conflict, Forbidden, InvalidInput
from app.jobs import service as jobs
from app.jobs.stages import REUSE_FINETUNE, REUSE_MERGE, REUSE_TRANSFER, Stage
from app.learnwares.service import get_visible
from app.ml.head import check_label_names, class_ids
from app.reuse.schemas import (
    FinetuneCreate,
    MergeCreate,
    MergeMethodRead,
    ReuseChoice,
    Shots,
    TaskReuseCreate,
    TaskReuseSubmitted,
    TransferCreate,
)
from app.runtime import Runtime
from app.tasks.service import get_owned

MERGE = "reuse.merge"
FINETUNE = "reuse.finetune"
TRANSFER = "reuse.transfer"


def result_privacy(key: ApiKey, private: bool | None, *, default: bool) -> bool:
    """Whether a reuse result is private. What a user key creates is that user's own: publishing
    a learnware (private: false) is a developer's act (or an admin's). ``None``: the route's
    ``default`` for developers and admins, private for users."""
    if key.role == Role.user:
        if private is False:
            raise Forbidden(
                "a user key's reuse results are private to it: publishing a learnware (private: false) "
                "takes a developer or admin key; omit private or send true"
            )
        return True
    return default if private is None else private


def _ready(session: Session, key: ApiKey, learnware_id: int) -> Learnware:
    learnware = get_visible(session, key, learnware_id)
    if learnware.status != LearnwareStatus.ready:
        raise Conflict(f"learnware {learnware_id} is {learnware.status.value}, not ready")
    return learnware


def _adapter(session: Session, key: ApiKey, learnware_id: int) -> Learnware:
    learnware = _ready(session, key, learnware_id)
    if learnware.model_format != "peft-lora":
        raise InvalidInput(
            f"learnware {learnware_id} is a {learnware.model_format} model; only peft-lora adapters "
            "can be fine-tuned or transferred"
        )
    return learnware


MERGEABLE = ("peft-lora", "hf-seqcls")


def _mergeable(session: Session, key: ApiKey, learnware_id: int) -> Learnware:
    """A LoRA adapter, or a full fine-tune of a base (a sequence classifier naming its base)."""
    learnware = _ready(session, key, learnware_id)
    if learnware.model_format not in MERGEABLE:
        raise InvalidInput(
            f"learnware {learnware_id} is a {learnware.model_format} model; only peft-lora adapters and "
            "hf-seqcls fine-tunes of a base can be merged"
        )
    if learnware.model_format == "hf-seqcls" and not learnware.base_model:
        raise InvalidInput(
            f"learnware {learnware_id} names no base_model: a merge needs fine-tunes of one base"
        )
    return learnware


def _shots(shots: Shots) -> dict[str, Any]:
    names = check_label_names(shots.label_names)
    ids = class_ids(shots.labels, names)
    return {"texts": list(shots.texts), "labels": ids, "label_names": names}


def _job(
    session: Session, runtime: Runtime, key: ApiKey, kind: str, stage: Stage, params: dict[str, Any]
) -> Job:
    job = jobs.create_job(
        session,
        kind=kind,
        first_stage=stage,
        owner=key,
        max_attempts=runtime.settings.job_max_attempts,
        space_id=runtime.default_space_id,
    )
    job.params = params
    return job


def merge_methods() -> list[MergeMethodRead]:
    from app.ml.merging import METHODS

    return [MergeMethodRead(name=m.name, help=m.summary, params=m.json_schema()) for m in METHODS.values()]


def _merge_params(
    learnwares: list[Learnware],
    method: str,
    params: dict[str, Any],
    name: str | None,
    private: bool,
    eval_shots: dict[str, Any] | None,
) -> dict[str, Any]:
    """A merge job's parameters, checked: one base, a known method, parameters it declares."""
    from app.ml.merging import get_method

    ids = [lw.id for lw in learnwares]
    if len(set(ids)) != len(ids):
        raise InvalidInput(f"learnware ids repeat: {ids}")
    bases = sorted({lw.base_model or "" for lw in learnwares})
    if len(bases) != 1:
        raise InvalidInput(f"learnwares of different bases cannot be merged: {bases}")
    formats = sorted({lw.model_format for lw in learnwares})
    if len(formats) != 1:
        raise InvalidInput(
            f"learnwares of different formats cannot be merged: {formats}; merge adapters with adapters "
            "and full fine-tunes with full fine-tunes"
        )
    return {
        "format": formats[0],
        "learnware_ids": ids,
        "method": method,
        "params": dict(get_method(method).resolve(params)),
        "base": bases[0],
        "label_names": list(dict.fromkeys(n for lw in learnwares for n in lw.label_names)),
        "name": name or f"merge of {', '.join(lw.name for lw in learnwares)}"[:128],
        "private": private,
        "eval": eval_shots,
    }


def _finetune_params(
    learnware: Learnware, shots: dict[str, Any], steps: int, holdout: float, seed: int, name: str | None
) -> dict[str, Any]:
    return {
        "learnware_id": learnware.id,
        "base": learnware.base_model,
        **shots,
        "steps": steps,
        "holdout": holdout,
        "seed": seed,
        "name": name or f"{learnware.name}, fine-tuned"[:128],
    }


def create_merge(session: Session, runtime: Runtime, key: ApiKey, body: MergeCreate) -> Job:
    private = result_privacy(key, body.private, default=False)
    if len(set(body.learnware_ids)) != len(body.learnware_ids):
        raise InvalidInput(f"learnware ids repeat: {body.learnware_ids}")
    learnwares = [_mergeable(session, key, i) for i in body.learnware_ids]
    params = _merge_params(
        learnwares,
        body.method,
        body.params,
        body.name,
        private,
        _shots(body.eval) if body.eval else None,
    )
    return _job(session, runtime, key, MERGE, REUSE_MERGE, params)


def create_finetune(session: Session, runtime: Runtime, key: ApiKey, body: FinetuneCreate) -> Job:
    private = result_privacy(key, body.private, default=True)
    learnware = _adapter(session, key, body.learnware_id)
    params = _finetune_params(learnware, _shots(body), body.steps, body.holdout, body.seed, body.name)
    return _job(session, runtime, key, FINETUNE, REUSE_FINETUNE, {**params, "private": private})


def _ranked_adapters(session: Session, key: ApiKey, task: UserTask) -> tuple[list[Learnware], list[int]]:
    """The task's matches that can be reused, best first: ready LoRA adapters this key may see,
    on the base of the best-ranked one."""
    chosen: list[Learnware] = []
    ranks: list[int] = []
    for match in task.results or []:
        learnware = session.get(Learnware, int(match["learnware_id"]))
        if learnware is None or learnware.status != LearnwareStatus.ready:
            continue
        if learnware.private and key.role != Role.admin and learnware.owner_id != key.id:
            continue
        if learnware.model_format != "peft-lora":
            continue
        if chosen and learnware.base_model != chosen[0].base_model:
            continue
        chosen.append(learnware)
        ranks.append(int(match["rank"]))
    return chosen, ranks


def create_task_reuse(
    session: Session, runtime: Runtime, key: ApiKey, task_id: int, body: TaskReuseCreate
) -> TaskReuseSubmitted:
    """Identify, then reuse: fine-tune the task's top adapter and merge its top ``merge_k``, each
    into the user's private learnware, measured on one held-out part of the shots."""
    from app.ml.merging import get_method
    from app.ml.reuse import split_shots

    task = get_owned(session, key, task_id)
    if task.status != TaskStatus.ready:
        raise Conflict(f"task {task_id} is {task.status.value}; reuse needs its ranked learnwares")
    if not body.finetune and body.merge_k < 2:
        raise InvalidInput("nothing to do: ask for finetune, or merge_k of 2 or more")
    adapters, ranks = _ranked_adapters(session, key, task)
    if not adapters:
        raise InvalidInput(
            f"none of task {task_id}'s {len(task.results or [])} matches is a ready LoRA adapter "
            "learnware: only adapters can be fine-tuned or merged"
        )
    shots = _shots(body)
    held = split_shots(shots["texts"], shots["labels"], body.holdout, body.seed)
    if len(set(held.train_labels.tolist())) < 2:
        raise InvalidInput("after holding out shots, the training part covers a single class")
    skipped: list[str] = []
    merge_params: dict[str, Any] | None = None
    if body.merge_k >= 2:
        get_method(body.merge_method).resolve(body.merge_params)  # refused now, even if skipped below
        k = min(body.merge_k, len(adapters))
        if k < 2:
            skipped.append(f"merge: only one adapter learnware (rank {ranks[0]}) among the task's matches")
        else:
            if k < body.merge_k:
                skipped.append(f"merge: {k} adapter learnwares among the task's matches, not {body.merge_k}")
            evaluation = {
                "texts": held.test_texts,
                "labels": held.test_labels.tolist(),
                "label_names": shots["label_names"],
            }
            name = f"{body.merge_method} merge of task {task_id}'s top {k}"
            merge_params = _merge_params(
                adapters[:k], body.merge_method, body.merge_params, name, True, evaluation
            )
    finetune: ReuseChoice | None = None
    if body.finetune:
        top = adapters[0]
        name = f"{top.name}, fine-tuned for task {task_id}"
        params = _finetune_params(top, shots, body.finetune_steps, body.holdout, body.seed, name)
        job = _job(session, runtime, key, FINETUNE, REUSE_FINETUNE, {**params, "private": True})
        finetune = ReuseChoice(job_id=job.id, kind=job.kind, learnware_ids=[top.id], ranks=ranks[:1])
    merge: ReuseChoice | None = None
    if merge_params is not None:
        job = _job(session, runtime, key, MERGE, REUSE_MERGE, merge_params)
        k = len(merge_params["learnware_ids"])
        merge = ReuseChoice(
            job_id=job.id, kind=job.kind, learnware_ids=merge_params["learnware_ids"], ranks=ranks[:k]
        )
    return TaskReuseSubmitted(task_id=task_id, finetune=finetune, merge=merge, skipped=skipped)


def create_transfer(session: Session, runtime: Runtime, key: ApiKey, body: TransferCreate) -> Job:
    from app.ml.bases import registered_bases
    from app.ml.transfer import base_model_type, check_pair, get_method

    private = result_privacy(key, body.private, default=False)
    learnware = _adapter(session, key, body.learnware_id)
    method = get_method(body.method)
    if body.target_base not in registered_bases():
        raise InvalidInput(f"unknown target base {body.target_base!r}; registered: {registered_bases()}")
    source = learnware.base_model or ""
    if body.target_base == source:
        raise InvalidInput(f"learnware {learnware.id} is already on {source}")
    check_pair(base_model_type(source), base_model_type(body.target_base))
    labels = class_ids(body.labels, list(learnware.label_names)) if body.labels is not None else None
    return _job(
        session,
        runtime,
        key,
        TRANSFER,
        REUSE_TRANSFER,
        {
            "learnware_id": learnware.id,
            "source_base": source,
            "target_base": body.target_base,
            "method": body.method,
            "params": method.resolve_params(body.params),
            "texts": list(body.texts),
            "labels": labels,
            "label_names": list(learnware.label_names),
            "name": body.name or f"{learnware.name} on {body.target_base}"[:128],
            "private": private,
        },
    )
