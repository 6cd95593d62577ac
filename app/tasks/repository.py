"""Queries on user tasks."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import Job, UserTask


def get(session: Session, task_id: int) -> UserTask | None:
    return session.get(UserTask, task_id)


def owned_by(session: Session, owner_id: int, *, offset: int, limit: int) -> Sequence[UserTask]:
    return session.scalars(
        select(UserTask)
        .where(UserTask.owner_id == owner_id)
        .order_by(UserTask.id.desc())
        .offset(offset)
        .limit(limit)
    ).all()


def latest_job_id(session: Session, task_id: int) -> int | None:
    return session.scalar(select(func.max(Job.id)).where(Job.task_id == task_id))
