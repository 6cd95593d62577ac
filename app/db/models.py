"""The dock's tables. Alembic migrations in ``migrations/`` create them; nothing calls ``create_all``."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db.base import Base, TimestampMixin, utcnow


def _enum(cls: type[StrEnum], name: str) -> SAEnum:
    """Store an enum as its string value with a CHECK constraint (no native PG enum types)."""
    return SAEnum(
        cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=24,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


class Role(StrEnum):
    developer = "developer"
    user = "user"
    admin = "admin"


class LearnwareStatus(StrEnum):
    pending = "pending"
    validating = "validating"
    fitting = "fitting"
    awaiting_review = "awaiting_review"
    ready = "ready"
    rejected = "rejected"
    failed = "failed"
    deleted = "deleted"


class TaskStatus(StrEnum):
    pending = "pending"
    running = "running"
    ready = "ready"
    failed = "failed"


class JobState(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


class SpecKind(StrEnum):
    model = "model"
    task = "task"


class SpecSource(StrEnum):
    computed = "computed"
    uploaded = "uploaded"


class ApiKey(Base):
    """An API key: only its sha256 is stored; ``prefix`` identifies it in lists and logs."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[Role] = mapped_column(_enum(Role, "role"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))


class SpecSpaceRecord(Base):
    """A spec space the dock serves; ``index_version`` counts changes to its index."""

    __tablename__ = "spec_spaces"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    dim: Mapped[int] = mapped_column(Integer)
    config: Mapped[dict[str, Any]]
    description: Mapped[dict[str, Any]]
    index_version: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (CheckConstraint("dim > 0", name="dim_positive"),)


class Spec(Base):
    """A PAVE vector (float32 bytes) of one space: a learnware's or a user task's."""

    __tablename__ = "specs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    space_id: Mapped[str] = mapped_column(ForeignKey("spec_spaces.id"), index=True)
    kind: Mapped[SpecKind] = mapped_column(_enum(SpecKind, "spec_kind"))
    source: Mapped[SpecSource] = mapped_column(_enum(SpecSource, "spec_source"))
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    sha256: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (CheckConstraint("dim > 0", name="dim_positive"),)


class Learnware(TimestampMixin, Base):
    """A submitted model package and its spec; indexed when ``status`` is ready."""

    __tablename__ = "learnwares"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"), index=True)
    status: Mapped[LearnwareStatus] = mapped_column(
        _enum(LearnwareStatus, "learnware_status"), default=LearnwareStatus.pending, index=True
    )
    status_reason: Mapped[str | None] = mapped_column(Text)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    tags: Mapped[list[str]] = mapped_column(default=list)
    task_type: Mapped[str] = mapped_column(String(64))
    label_names: Mapped[list[str]] = mapped_column(default=list)
    model_format: Mapped[str] = mapped_column(String(32))
    base_model: Mapped[str | None] = mapped_column(String(200))
    license: Mapped[str | None] = mapped_column(String(100))
    manifest: Mapped[dict[str, Any]] = mapped_column(default=dict)
    package_sha256: Mapped[str] = mapped_column(String(64), index=True)
    weights_sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    """The model's weights fingerprint (``app.ml.fingerprint``): the same weights under another
    name or owner are refused as a duplicate. None for learnwares submitted before it existed."""
    package_size: Mapped[int] = mapped_column(BigInteger)
    space_id: Mapped[str] = mapped_column(ForeignKey("spec_spaces.id"), index=True)
    spec_id: Mapped[int | None] = mapped_column(ForeignKey("specs.id", ondelete="SET NULL"))
    uploaded_spec_id: Mapped[int | None] = mapped_column(ForeignKey("specs.id", ondelete="SET NULL"))
    spec_recomputed: Mapped[bool | None]
    predictions_sha256: Mapped[str | None] = mapped_column(String(64))
    validation_log: Mapped[list[str]] = mapped_column(default=list)
    index_seq: Mapped[int | None] = mapped_column(BigInteger)
    """The space's ``index_version`` at this learnware's last index change (add or remove)."""
    private: Mapped[bool] = mapped_column(default=False)
    """Seen by its owner (and admins) alone, never indexed: a user's own merge or fine-tune."""
    download_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Package downloads (API and web), for the market's "most downloaded" order."""
    ranked_first_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Tasks that ranked this learnware first, for the market's "most often ranked first" order."""
    lineage: Mapped[dict[str, Any] | None] = mapped_column()
    """Where a reuse job's result came from: ``{"kind": "merge"|"finetune"|"transfer", "from": [ids]}``."""
    ready_at: Mapped[datetime | None]
    deleted_at: Mapped[datetime | None]

    spec: Mapped[Spec | None] = relationship(foreign_keys=[spec_id], lazy="raise")

    __table_args__ = (
        Index("ix_learnwares_space_index_seq", "space_id", "index_seq"),
        CheckConstraint("package_size >= 0", name="package_size_nonnegative"),
    )


class UserTask(TimestampMixin, Base):
    """A user's few-shot task (or uploaded task spec) and its ranked learnwares."""

    __tablename__ = "user_tasks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"), index=True)
    status: Mapped[TaskStatus] = mapped_column(_enum(TaskStatus, "task_status"), default=TaskStatus.pending)
    label_names: Mapped[list[str]] = mapped_column(default=list)
    examples: Mapped[dict[str, Any] | None] = mapped_column()
    """{"texts": [...], "labels": [...]} until the spec is fitted; erased after unless kept."""
    n_examples: Mapped[int] = mapped_column(Integer, default=0)
    space_id: Mapped[str] = mapped_column(ForeignKey("spec_spaces.id"))
    spec_id: Mapped[int | None] = mapped_column(ForeignKey("specs.id", ondelete="SET NULL"))
    top_k: Mapped[int] = mapped_column(Integer, default=10)
    results: Mapped[list[Any] | None] = mapped_column()
    index_version: Mapped[int | None] = mapped_column(BigInteger)
    error: Mapped[str | None] = mapped_column(Text)
    identified_at: Mapped[datetime | None]

    __table_args__ = (CheckConstraint("top_k > 0", name="top_k_positive"),)


class Job(Base):
    """The truth about a background job: state, stage, progress, log, result, attempts."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(48), index=True)
    stage: Mapped[str] = mapped_column(String(48))
    """The step to run next (a job may pass through several, on different queues)."""
    queue: Mapped[str] = mapped_column(String(32))
    state: Mapped[JobState] = mapped_column(_enum(JobState, "job_state"), default=JobState.queued, index=True)
    progress: Mapped[float] = mapped_column(default=0.0)
    message: Mapped[str] = mapped_column(Text, default="")
    log: Mapped[list[str]] = mapped_column(default=list)
    params: Mapped[dict[str, Any] | None] = mapped_column()
    """The job's inputs where its subject ids do not say it all (reuse jobs)."""
    result: Mapped[dict[str, Any] | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    worker: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None]
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"), index=True)
    learnware_id: Mapped[int | None] = mapped_column(ForeignKey("learnwares.id", ondelete="SET NULL"))
    task_id: Mapped[int | None] = mapped_column(ForeignKey("user_tasks.id", ondelete="SET NULL"))
    space_id: Mapped[str | None] = mapped_column(ForeignKey("spec_spaces.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("progress >= 0 AND progress <= 1", name="progress_range"),
        CheckConstraint("attempts >= 0", name="attempts_nonnegative"),
        Index("ix_jobs_state_heartbeat", "state", "heartbeat_at"),
    )
