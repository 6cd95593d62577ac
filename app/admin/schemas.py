"""Bodies of the admin dashboard's endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.db.models import JobState


class QueueRead(BaseModel):
    name: str
    broker_messages: int | None = Field(
        description="messages waiting in the broker (Redis LLEN; files in the embedded broker's "
        "folder); null when the broker could not be asked"
    )
    queued_jobs: int = Field(description="jobs the database says wait on this queue")
    running_jobs: int
    oldest_queued_s: float | None = Field(description="age of the oldest job waiting on this queue")


class WorkerJob(BaseModel):
    id: int
    kind: str
    stage: str
    queue: str
    progress: float
    message: str
    heartbeat_at: datetime | None
    stale: bool = Field(description="its heartbeat is overdue (the reaper will re-queue it)")


WorkerStatus = Literal["online", "busy", "stale"]


class WorkerRead(BaseModel):
    name: str
    status: WorkerStatus = Field(
        description="online: answered the last broadcast; busy: did not answer but beats for a "
        "running job; stale: its running jobs' heartbeats are overdue"
    )
    answered: bool = Field(description="answered the last remote-control broadcast")
    last_seen: datetime | None
    jobs: list[WorkerJob]


class WorkersRead(BaseModel):
    workers: list[WorkerRead]
    asked_at: datetime | None = Field(description="when the workers were last asked (null: not yet)")
    error: str | None = Field(description="why the last broadcast failed")


class IndexRead(BaseModel):
    space_id: str
    base: str | None
    dim: int
    index_version: int
    ready_learnwares: int = Field(description="learnwares the database says are in the index")
    awaiting_review: int
    indexed: int | None = Field(description="vectors in this API process's index (null: it failed to load)")
    error: str | None = Field(description="why this process's index could not be loaded")


class Overview(BaseModel):
    generated_at: datetime
    queues: list[QueueRead]
    broker_error: str | None
    job_counts: dict[JobState, int]
    workers: WorkersRead
    indexes: list[IndexRead]
    awaiting_review: int
    flower_url: str | None
    review_required: bool


class JobBucket(BaseModel):
    """Jobs that ended in one interval."""

    start: datetime
    succeeded: int
    failed: int
    cancelled: int
    mean_s: float | None = Field(description="mean run time (started to finished) of those that ran")
    p95_s: float | None


class RequestPointRead(BaseModel):
    at: datetime
    requests_per_s: float
    errors: int
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None


class Charts(BaseModel):
    minutes: int
    bucket_s: int
    jobs: list[JobBucket]
    requests: list[RequestPointRead] = Field(
        description="the API's traffic in this process, sampled every few seconds (admin pages, "
        "probes and event streams left out)"
    )
