"""Reuse requests are checked in the request (learnwares visible, ready, LoRA adapters of one
base; method and parameters known), then a job does the work (``pipeline``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.api.errors import Conflict
from app.db.models import ApiKey, Job, Learnware, LearnwareStatus
from app.jobs import service as jobs
from app.jobs.stages import REUSE_FINETUNE, REUSE_MERGE, REUSE_TRANSFER, Stage
from app.learnwares.service import get_visible
from app.ml.errors import InvalidInput
from app.ml.head import check_label_names
from app.reuse.schemas import FinetuneCreate, MergeCreate, MergeMethodRead, Shots, TransferCreate
from app.runtime import Runtime
from app.tasks.service import class_ids

MERGE = "reuse.merge"
FINETUNE = "reuse.finetune"
TRANSFER = "reuse.transfer"


def _adapter(session: Session, key: ApiKey, learnware_id: int) -> Learnware:
    learnware = get_visible(session, key, learnware_id)
    if learnware.status != LearnwareStatus.ready:
        raise Conflict(f"learnware {learnware_id} is {learnware.status.value}, not ready")
    if learnware.model_format != "peft-lora":
        raise InvalidInput(
            f"learnware {learnware_id} is a {learnware.model_format} model; only peft-lora adapters "
            "can be merged, fine-tuned or transferred"
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


def create_merge(session: Session, runtime: Runtime, key: ApiKey, body: MergeCreate) -> Job:
    from app.ml.merging import get_method

    if len(set(body.learnware_ids)) != len(body.learnware_ids):
        raise InvalidInput(f"learnware ids repeat: {body.learnware_ids}")
    learnwares = [_adapter(session, key, i) for i in body.learnware_ids]
    bases = sorted({lw.base_model or "" for lw in learnwares})
    if len(bases) != 1:
        raise InvalidInput(f"learnwares of different bases cannot be merged: {bases}")
    params = dict(get_method(body.method).resolve(body.params))
    label_names = list(dict.fromkeys(name for lw in learnwares for name in lw.label_names))
    return _job(
        session,
        runtime,
        key,
        MERGE,
        REUSE_MERGE,
        {
            "learnware_ids": body.learnware_ids,
            "method": body.method,
            "params": params,
            "base": bases[0],
            "label_names": label_names,
            "name": body.name or f"merge of {', '.join(lw.name for lw in learnwares)}"[:128],
            "private": body.private,
            "eval": _shots(body.eval) if body.eval else None,
        },
    )


def create_finetune(session: Session, runtime: Runtime, key: ApiKey, body: FinetuneCreate) -> Job:
    learnware = _adapter(session, key, body.learnware_id)
    shots = _shots(body)
    return _job(
        session,
        runtime,
        key,
        FINETUNE,
        REUSE_FINETUNE,
        {
            "learnware_id": learnware.id,
            "base": learnware.base_model,
            **shots,
            "steps": body.steps,
            "holdout": body.holdout,
            "seed": body.seed,
            "name": body.name or f"{learnware.name}, fine-tuned"[:128],
            "private": body.private,
        },
    )


def create_transfer(session: Session, runtime: Runtime, key: ApiKey, body: TransferCreate) -> Job:
    from app.ml.encoders import registered_bases
    from app.ml.transfer import base_model_type, check_pair, get_method

    learnware = _adapter(session, key, body.learnware_id)
    method = get_method(body.method)
    if method.output != "adapter":
        raise InvalidInput(
            f"{body.method} yields an embedding operator, not an adapter: no learnware format carries it; "
            "use bico, theseus, input_only, output_only or naive"
        )
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
            "private": body.private,
        },
    )
