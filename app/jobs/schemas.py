"""Job bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.db.models import JobState


class JobRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    stage: str = Field(description="the step it is at (or stopped at)")
    queue: str
    state: JobState
    progress: float = Field(ge=0, le=1)
    message: str
    log: list[str]
    result: dict[str, Any] | None
    error: str | None = Field(description="why it failed")
    attempts: int
    max_attempts: int
    worker: str | None
    heartbeat_at: datetime | None
    learnware_id: int | None
    task_id: int | None
    space_id: str | None
    created_at: datetime
    published_at: datetime | None = Field(
        default=None, description="when the broker took the job's current message (None: not yet)"
    )
    started_at: datetime | None
    finished_at: datetime | None


class JobPage(BaseModel):
    items: list[JobRead]
    total_count: int


class JobSubmitted(BaseModel):
    job_id: int
