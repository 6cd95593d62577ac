"""Queries on learnwares."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
from sqlalchemy import ColumnElement, String, cast, func, or_, select
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Job, JobState, Learnware, LearnwareStatus, Role, Spec
from app.index.registry import vector_from_bytes


def get(session: Session, learnware_id: int) -> Learnware | None:
    return session.get(Learnware, learnware_id)


def visible_to(key: ApiKey) -> ColumnElement[bool]:
    """Ready public learnwares for everyone; an owner also sees their own in any state; admins all."""
    if key.role == Role.admin:
        return Learnware.status != LearnwareStatus.deleted
    return or_(
        (Learnware.status == LearnwareStatus.ready) & Learnware.private.is_(False),
        (Learnware.owner_id == key.id) & (Learnware.status != LearnwareStatus.deleted),
    )


def ready_by_ids(session: Session, ids: Sequence[int]) -> dict[int, Learnware]:
    if not ids:
        return {}
    rows = session.scalars(
        select(Learnware).where(
            Learnware.id.in_(list(ids)),
            Learnware.status == LearnwareStatus.ready,
            Learnware.private.is_(False),
        )
    ).all()
    return {r.id: r for r in rows}


def label_sets(session: Session, space_id: str) -> list[tuple[list[str], int]]:
    """The label names of a space's ready public learnwares, each with how many have them (what a
    task's spec may be refitted under: `ranking.realignments`)."""
    as_text = cast(Learnware.label_names, String)
    rows = session.execute(
        select(as_text, func.count())
        .where(
            Learnware.space_id == space_id,
            Learnware.status == LearnwareStatus.ready,
            Learnware.private.is_(False),
        )
        .group_by(as_text)
    ).all()
    return [([str(n) for n in json.loads(names)], int(count)) for names, count in rows]


def spec_vectors(session: Session, learnware_ids: Sequence[int]) -> dict[int, np.ndarray]:
    """The current spec vector of each of these learnwares that has one."""
    if not learnware_ids:
        return {}
    rows = session.execute(
        select(Learnware.id, Spec.vector, Spec.dim)
        .join(Spec, Spec.id == Learnware.spec_id)
        .where(Learnware.id.in_(list(learnware_ids)))
    ).all()
    return {int(i): vector_from_bytes(blob, int(dim)) for i, blob, dim in rows}


def duplicate_of(session: Session, owner_id: int, package_sha256: str) -> Learnware | None:
    return session.scalar(
        select(Learnware).where(
            Learnware.owner_id == owner_id,
            Learnware.package_sha256 == package_sha256,
            Learnware.status.not_in(
                (LearnwareStatus.deleted, LearnwareStatus.rejected, LearnwareStatus.failed)
            ),
        )
    )


def same_weights(session: Session, weights_sha256: str) -> Learnware | None:
    """The first live public learnware with these weights: a public submission of them again,
    from anyone, under any name, would be a copy of it in the market."""
    return session.scalar(
        select(Learnware)
        .where(
            Learnware.weights_sha256 == weights_sha256,
            Learnware.private.is_(False),
            Learnware.status.not_in(
                (LearnwareStatus.deleted, LearnwareStatus.rejected, LearnwareStatus.failed)
            ),
        )
        .order_by(Learnware.id)
        .limit(1)
    )


def package_in_use(session: Session, package_sha256: str, *, except_id: int) -> bool:
    return (
        session.scalar(
            select(Learnware.id).where(
                Learnware.package_sha256 == package_sha256,
                Learnware.id != except_id,
                Learnware.status != LearnwareStatus.deleted,
            )
        )
        is not None
    )


def open_jobs(session: Session, learnware_id: int) -> Sequence[Job]:
    return session.scalars(
        select(Job).where(
            Job.learnware_id == learnware_id, Job.state.in_((JobState.queued, JobState.running))
        )
    ).all()


def latest_job_id(session: Session, learnware_id: int) -> int | None:
    return session.scalar(select(func.max(Job.id)).where(Job.learnware_id == learnware_id))
