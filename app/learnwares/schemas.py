"""Learnware bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from app.api.types import Text
from app.db.models import LearnwareStatus

T = TypeVar("T")


class Pagination(BaseModel):
    total_count: int
    page: int
    limit: int
    max_page: int


class Page(BaseModel, Generic[T]):
    items: list[T]
    pagination: Pagination


class LearnwareRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    tags: list[str]
    task_type: str
    label_names: list[str]
    model_format: str
    base_model: str | None
    license: str | None
    status: LearnwareStatus
    status_reason: str | None
    owner_id: int | None
    package_sha256: str
    weights_sha256: str | None = Field(
        default=None, description="fingerprint of the model's weights; the same weights are refused twice"
    )
    package_size: int
    space_id: str
    spec_id: int | None
    spec_recomputed: bool | None = Field(
        description="true: the dock fitted the spec; false: the developer's uploaded spec was verified and kept"
    )
    validation_log: list[str]
    download_count: int = Field(default=0, description="downloads of its package")
    ranked_first_count: int = Field(default=0, description="tasks that ranked it first")
    lineage: dict[str, Any] | None = Field(
        default=None,
        description="for a reuse job's result: the kind of job and the learnwares it came from",
    )
    created_at: datetime
    updated_at: datetime
    ready_at: datetime | None


class LearnwareSubmitted(BaseModel):
    learnware_id: int
    job_id: int
    status: LearnwareStatus
    spec_uploaded: bool
    spec_stored: str | None = Field(
        default=None, description='the uploaded spec\'s stored form: "sign-bits" (packed) or "float32"'
    )


class ReviewDecision(BaseModel):
    reason: Text | None = Field(default=None, max_length=2000)
