"""Queries on API keys."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Role


def by_hash(session: Session, key_hash: str) -> ApiKey | None:
    return session.scalar(select(ApiKey).where(ApiKey.key_hash == key_hash))


def by_id(session: Session, key_id: int) -> ApiKey | None:
    return session.get(ApiKey, key_id)


def list_keys(session: Session, role: Role | None = None) -> Sequence[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.id)
    if role is not None:
        query = query.where(ApiKey.role == role)
    return session.scalars(query).all()


def prefix_taken(session: Session, prefix: str) -> bool:
    return session.scalar(select(ApiKey.id).where(ApiKey.prefix == prefix)) is not None
