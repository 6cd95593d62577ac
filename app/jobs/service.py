"""Job state transitions. Every write is guarded by the state it expects, so two workers, a
redelivered message and the reaper can race without running a step twice or losing a job.

A run owns a job by its attempt number: ``claim`` increments ``attempts`` and later writes of
that run match on it. A run whose job was re-queued (its heartbeat went stale) or cancelled
finds its writes refused and stops (``JobLost``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.models import ApiKey, Job, JobState, Learnware, LearnwareStatus, Role, TaskStatus, UserTask
from app.errors import Conflict, Forbidden, NotFound
from app.jobs.dispatch import enqueue
from app.jobs.stages import Stage, stage

log = logging.getLogger(__name__)

MAX_LOG_LINES = 500
TERMINAL = (JobState.succeeded, JobState.failed, JobState.cancelled)


class JobLost(Exception):
    """This run no longer owns its job (re-queued after a lost heartbeat, or cancelled)."""


def _line(message: str, now: datetime | None = None) -> str:
    return f"{(now or utcnow()).isoformat(timespec='seconds')} {message}"


def _appended(job_log: Sequence[str], *lines: str) -> list[str]:
    return [*job_log, *lines][-MAX_LOG_LINES:]


# ---- creation and reading (API side) -------------------------------------------------------


def create_job(
    session: Session,
    *,
    kind: str,
    first_stage: Stage,
    owner: ApiKey | None,
    max_attempts: int,
    learnware_id: int | None = None,
    task_id: int | None = None,
    space_id: str | None = None,
) -> Job:
    """Add a queued job and send it once the caller's transaction commits."""
    now = utcnow()
    job = Job(
        kind=kind,
        stage=first_stage.name,
        queue=first_stage.queue,
        state=JobState.queued,
        progress=0.0,
        message=f"queued: {first_stage.description}",
        log=[_line(f"queued {first_stage.name} on the {first_stage.queue} queue", now)],
        attempts=0,
        max_attempts=max_attempts,
        owner_id=owner.id if owner else None,
        learnware_id=learnware_id,
        task_id=task_id,
        space_id=space_id,
        created_at=now,
        dispatched_at=now,
    )
    session.add(job)
    session.flush()
    enqueue(session, job.id, first_stage)
    return job


def get_visible_job(session: Session, job_id: int, key: ApiKey) -> Job:
    """A job its owner or an admin may read."""
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    if key.role != Role.admin and job.owner_id != key.id:
        raise Forbidden(
            f"job {job_id} belongs to another key: only the key that started it (or an admin) may see it"
        )
    return job


def list_jobs(
    session: Session,
    *,
    state: JobState | None = None,
    kind: str | None = None,
    owner_id: int | None = None,
    offset: int = 0,
    limit: int = 50,
) -> tuple[Sequence[Job], int]:
    query = select(Job)
    if state is not None:
        query = query.where(Job.state == state)
    if kind is not None:
        query = query.where(Job.kind == kind)
    if owner_id is not None:
        query = query.where(Job.owner_id == owner_id)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(Job.id.desc()).offset(offset).limit(limit)).all()
    return rows, int(total)


def cancel_job(session: Session, job_id: int, key: ApiKey) -> Job:
    """Cancel a queued or running job; a running step stops at its next progress report."""
    job = get_visible_job(session, job_id, key)
    if job.state in TERMINAL:
        raise Conflict(f"job {job_id} is already {job.state.value}")
    job.state = JobState.cancelled
    job.finished_at = utcnow()
    job.message = f"cancelled by key {key.prefix}"
    job.log = _appended(job.log, _line(job.message))
    _fail_subject(session, job, f"job {job_id} was cancelled", rejected=False)
    return job


def retry_job(session: Session, job_id: int, key: ApiKey) -> Job:
    """Run a failed or cancelled job again from the stage where it stopped (admin)."""
    job = get_visible_job(session, job_id, key)
    if job.state not in (JobState.failed, JobState.cancelled):
        raise Conflict(f"job {job_id} is {job.state.value}; only failed or cancelled jobs are retried")
    step = stage(job.stage)
    job.state = JobState.queued
    job.attempts = 0
    job.error = None
    job.finished_at = None
    job.worker = None
    job.heartbeat_at = None
    job.dispatched_at = utcnow()
    job.message = f"retried by key {key.prefix}"
    job.log = _appended(job.log, _line(f"{job.message}: queued {step.name} on the {step.queue} queue"))
    if job.learnware_id is not None:
        session.execute(
            update(Learnware)
            .where(Learnware.id == job.learnware_id, Learnware.status.in_(_RETRYABLE_LEARNWARE))
            .values(status=LearnwareStatus.pending, status_reason=None)
        )
    if job.task_id is not None:
        session.execute(
            update(UserTask).where(UserTask.id == job.task_id).values(status=TaskStatus.pending, error=None)
        )
    session.flush()
    enqueue(session, job.id, step)
    return job


_RETRYABLE_LEARNWARE = (LearnwareStatus.failed, LearnwareStatus.rejected)


# ---- worker side: claim, report, finish ---------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    job_id: int
    attempt: int
    stage: str


def claim(
    session: Session, job_id: int, stage_name: str, worker: str, stale_after: timedelta
) -> Claim | None:
    """Take the job for this run, or None when it is not ours to run (done, running elsewhere,
    another stage, or out of attempts, in which case it is failed here with that reason)."""
    now = utcnow()
    result = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.stage == stage_name,
            Job.attempts < Job.max_attempts,
            or_(
                Job.state == JobState.queued,
                and_(Job.state == JobState.running, Job.heartbeat_at < now - stale_after),
            ),
        )
        .values(
            state=JobState.running,
            attempts=Job.attempts + 1,
            worker=worker,
            heartbeat_at=now,
            started_at=func.coalesce(Job.started_at, now),
            message=f"running {stage_name}",
        )
        .execution_options(synchronize_session=False)
    )
    if getattr(result, "rowcount", 0) != 1:
        job = session.get(Job, job_id)
        if job is not None and job.state == JobState.queued and job.attempts >= job.max_attempts:
            fail(session, job_id, None, f"gave up after {job.attempts} attempts", rejected=False)
        return None
    job = session.get(Job, job_id, populate_existing=True)
    assert job is not None
    job.log = _appended(
        job.log, _line(f"attempt {job.attempts}/{job.max_attempts} of {stage_name} on {worker}", now)
    )
    return Claim(job_id=job_id, attempt=job.attempts, stage=stage_name)


def _owned(job_id: int, attempt: int) -> Any:
    return and_(Job.id == job_id, Job.state == JobState.running, Job.attempts == attempt)


def _owned_job(session: Session, claim_: Claim) -> Job:
    job = session.get(Job, claim_.job_id, populate_existing=True, with_for_update=True)
    if job is None or job.state != JobState.running or job.attempts != claim_.attempt:
        raise JobLost(f"job {claim_.job_id} attempt {claim_.attempt} no longer owns the job")
    return job


def heartbeat(
    session: Session, claim_: Claim, *, progress: float | None = None, message: str | None = None
) -> None:
    """Record that the run is alive (and its progress); JobLost if it no longer owns the job."""
    values: dict[str, Any] = {"heartbeat_at": utcnow()}
    if progress is not None:
        values["progress"] = min(1.0, max(0.0, progress))
    if message is not None:
        values["message"] = message
    result = session.execute(
        update(Job)
        .where(_owned(claim_.job_id, claim_.attempt))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if getattr(result, "rowcount", 0) != 1:
        raise JobLost(f"job {claim_.job_id} attempt {claim_.attempt} no longer owns the job")


def append_log(session: Session, claim_: Claim, *lines: str) -> None:
    job = _owned_job(session, claim_)
    job.log = _appended(job.log, *(_line(line) for line in lines))


def advance(session: Session, claim_: Claim, next_stage: Stage, *, progress: float, message: str) -> None:
    """Hand the job to its next stage (maybe on another queue) in the caller's transaction."""
    job = _owned_job(session, claim_)
    job.stage = next_stage.name
    job.queue = next_stage.queue
    job.state = JobState.queued
    job.attempts = 0
    job.worker = None
    job.heartbeat_at = None
    job.progress = progress
    job.message = message
    job.dispatched_at = utcnow()
    job.log = _appended(
        job.log, _line(f"{message}; queued {next_stage.name} on the {next_stage.queue} queue")
    )
    session.flush()
    enqueue(session, job.id, next_stage)


def succeed(session: Session, claim_: Claim, *, result: dict[str, Any], message: str) -> None:
    job = _owned_job(session, claim_)
    job.state = JobState.succeeded
    job.progress = 1.0
    job.result = result
    job.message = message
    job.finished_at = utcnow()
    job.log = _appended(job.log, _line(message))


def release_for_retry(session: Session, claim_: Claim, reason: str) -> None:
    """Give the job back to the queue after a transient error (Celery re-sends it)."""
    job = _owned_job(session, claim_)
    job.state = JobState.queued
    job.worker = None
    job.heartbeat_at = None
    job.dispatched_at = utcnow()
    job.message = f"transient error, will retry: {reason}"
    job.log = _appended(job.log, _line(job.message))


def fail(session: Session, job_id: int, attempt: int | None, reason: str, *, rejected: bool) -> bool:
    """Fail the job with ``reason`` (and its learnware or task). ``rejected``: the input was at
    fault (the learnware is rejected), not the dock. Returns False if the run lost the job."""
    job = session.get(Job, job_id, populate_existing=True, with_for_update=True)
    if job is None or job.state in TERMINAL:
        return False
    if attempt is not None and (job.state != JobState.running or job.attempts != attempt):
        return False
    job.state = JobState.failed
    job.error = reason
    job.message = f"failed: {reason}"
    job.finished_at = utcnow()
    job.log = _appended(job.log, _line(job.message))
    _fail_subject(session, job, reason, rejected=rejected)
    return True


def _fail_subject(session: Session, job: Job, reason: str, *, rejected: bool) -> None:
    if job.learnware_id is not None:
        status = LearnwareStatus.rejected if rejected else LearnwareStatus.failed
        session.execute(
            update(Learnware)
            .where(
                Learnware.id == job.learnware_id,
                Learnware.status.not_in((LearnwareStatus.ready, LearnwareStatus.deleted)),
            )
            .values(status=status, status_reason=reason, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
    if job.task_id is not None:
        session.execute(
            update(UserTask)
            .where(UserTask.id == job.task_id)
            .values(status=TaskStatus.failed, error=reason, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )


# ---- the reaper -------------------------------------------------------------------------------


@dataclass
class ReapReport:
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    redispatched: list[int] = field(default_factory=list)


def reap(
    session: Session,
    *,
    stale_after: timedelta,
    redispatch_after: timedelta,
    waiting: Mapping[str, int | None] | None = None,
) -> ReapReport:
    """Re-queue running jobs whose worker stopped beating (or fail them at max attempts), and
    re-send queued jobs nobody claimed for a long time whose queue is empty: their message was
    lost (a publish that failed after the commit, a broker that lost its data). ``waiting`` is
    the broker's message count per queue; a queue with messages waiting is only backlogged."""
    now = utcnow()
    report = ReapReport()
    stale = session.scalars(
        select(Job)
        .where(Job.state == JobState.running, Job.heartbeat_at < now - stale_after)
        .with_for_update(skip_locked=True)
    ).all()
    for job in stale:
        silent = (now - job.heartbeat_at).total_seconds() if job.heartbeat_at else float("nan")
        lost = f"worker {job.worker} lost during {job.stage} (no heartbeat for {silent:.0f} s)"
        if job.attempts >= job.max_attempts:
            fail(session, job.id, None, f"{lost}; gave up after {job.attempts} attempts", rejected=False)
            report.failed.append(job.id)
            continue
        job.state = JobState.queued
        job.worker = None
        job.heartbeat_at = None
        job.dispatched_at = now
        job.message = f"{lost}; re-queued"
        job.log = _appended(
            job.log, _line(f"{job.message} (attempt {job.attempts} of {job.max_attempts} used)", now)
        )
        session.flush()
        enqueue(session, job.id, stage(job.stage))
        report.requeued.append(job.id)
    forgotten = session.scalars(
        select(Job)
        .where(Job.state == JobState.queued, Job.dispatched_at < now - redispatch_after)
        .with_for_update(skip_locked=True)
    ).all()
    for job in forgotten:
        if waiting is not None and waiting.get(job.queue) != 0:
            continue
        job.dispatched_at = now
        job.log = _appended(job.log, _line("no worker claimed the job; sent again", now))
        session.flush()
        enqueue(session, job.id, stage(job.stage))
        report.redispatched.append(job.id)
    return report
