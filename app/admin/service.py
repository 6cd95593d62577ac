"""What the dashboard shows, read from the database (the truth about jobs and learnwares), the
broker (messages waiting), the workers (what they say they run) and this process's indexes."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.admin.monitor import RequestHistory, WorkerReport
from app.admin.schemas import (
    Charts,
    IndexRead,
    JobBucket,
    Overview,
    QueueRead,
    RequestPointRead,
    WorkerJob,
    WorkerRead,
    WorkersRead,
    WorkerStatus,
)
from app.db.base import utcnow
from app.db.models import Job, JobState, Learnware, LearnwareStatus, SpecSpaceRecord
from app.jobs.dispatch import queue_depths
from app.jobs.stages import QUEUES
from app.runtime import Runtime

log = logging.getLogger(__name__)


def queues(session: Session, runtime: Runtime) -> tuple[list[QueueRead], str | None]:
    """Each queue: broker messages, and the jobs the database says wait or run on it."""
    counts: dict[tuple[str, JobState], int] = {}
    for queue, state, count in session.execute(
        select(Job.queue, Job.state, func.count())
        .where(Job.state.in_((JobState.queued, JobState.running)))
        .group_by(Job.queue, Job.state)
    ):
        counts[(queue, JobState(state))] = int(count)
    oldest = dict(
        session.execute(
            select(Job.queue, func.min(Job.created_at))
            .where(Job.state == JobState.queued)
            .group_by(Job.queue)
        )
        .tuples()
        .all()
    )
    error = None
    depths: dict[str, int] = {}
    try:
        depths = queue_depths(runtime.celery)
    except Exception as exc:
        log.warning("queue depths unavailable: %s", exc)
        error = f"{type(exc).__name__}: {exc}"
    now = utcnow()
    names = list(QUEUES) + sorted({q for q, _ in counts} - set(QUEUES))
    return [
        QueueRead(
            name=name,
            broker_messages=depths.get(name),
            queued_jobs=counts.get((name, JobState.queued), 0),
            running_jobs=counts.get((name, JobState.running), 0),
            oldest_queued_s=(now - oldest[name]).total_seconds() if oldest.get(name) else None,
        )
        for name in names
    ], error


def job_counts(session: Session) -> dict[JobState, int]:
    counts = dict.fromkeys(JobState, 0)
    for state, count in session.execute(select(Job.state, func.count()).group_by(Job.state)):
        counts[JobState(state)] = int(count)
    return counts


def workers(session: Session, report: WorkerReport | None, stale_after_s: float) -> WorkersRead:
    """Workers that answered the last broadcast, and workers the jobs table says run something
    (a worker beats for its job every few seconds), each with the jobs it runs."""
    answered = report.active if report else {}
    reported_ids = {job_id for ids in answered.values() for job_id in ids}
    rows = session.scalars(
        select(Job).where((Job.state == JobState.running) | Job.id.in_(reported_ids)).order_by(Job.id)
    ).all()
    now = utcnow()
    overdue = now - timedelta(seconds=stale_after_s)
    jobs_of: dict[str, list[WorkerJob]] = defaultdict(list)
    beats: dict[str, datetime] = {}
    by_id = {job.id: job for job in rows}
    placed: set[int] = set()

    def place(name: str, job: Job) -> None:
        beat = job.heartbeat_at
        jobs_of[name].append(
            WorkerJob(
                id=job.id,
                kind=job.kind,
                stage=job.stage,
                queue=job.queue,
                progress=job.progress,
                message=job.message,
                heartbeat_at=beat,
                stale=job.state == JobState.running and (beat is None or beat < overdue),
            )
        )
        placed.add(job.id)
        if beat is not None and (name not in beats or beat > beats[name]):
            beats[name] = beat

    for job in rows:
        if job.state == JobState.running and job.worker:
            place(job.worker, job)
    for name, ids in answered.items():
        for job_id in ids:
            if job_id in by_id and job_id not in placed:
                place(name, by_id[job_id])
    result = []
    for name in sorted(set(answered) | set(jobs_of)):
        jobs = jobs_of.get(name, [])
        status: WorkerStatus
        if name in answered:
            status = "online"
        elif any(not j.stale for j in jobs):
            status = "busy"
        else:
            status = "stale"
        last_seen = report.at if report and name in answered else beats.get(name)
        result.append(
            WorkerRead(name=name, status=status, answered=name in answered, last_seen=last_seen, jobs=jobs)
        )
    return WorkersRead(
        workers=result, asked_at=report.at if report else None, error=report.error if report else None
    )


def indexes(session: Session, runtime: Runtime) -> list[IndexRead]:
    """Each spec space: what the database says is indexed, and this process's index (synced)."""
    counts: dict[tuple[str, LearnwareStatus], int] = {}
    for space_id, status, count in session.execute(
        select(Learnware.space_id, Learnware.status, func.count())
        .where(Learnware.status.in_((LearnwareStatus.ready, LearnwareStatus.awaiting_review)))
        .group_by(Learnware.space_id, Learnware.status)
    ):
        counts[(space_id, LearnwareStatus(status))] = int(count)
    result = []
    for record in session.scalars(select(SpecSpaceRecord).order_by(SpecSpaceRecord.created_at)):
        indexed: int | None = None
        error: str | None = None
        try:
            indexed = runtime.indexes.status(record.id).size
        except Exception as exc:
            log.warning("index %s unavailable: %s", record.id, exc)
            error = f"{type(exc).__name__}: {exc}"
        base = record.config.get("base")
        result.append(
            IndexRead(
                space_id=record.id,
                base=str(base) if base else None,
                dim=record.dim,
                index_version=record.index_version,
                ready_learnwares=counts.get((record.id, LearnwareStatus.ready), 0),
                awaiting_review=counts.get((record.id, LearnwareStatus.awaiting_review), 0),
                indexed=indexed,
                error=error,
            )
        )
    return result


def overview(session: Session, runtime: Runtime, report: WorkerReport | None, flower_url: str) -> Overview:
    """Everything the dashboard's cards and tables show, in one read."""
    queue_rows, broker_error = queues(session, runtime)
    awaiting = session.scalar(select(func.count()).where(Learnware.status == LearnwareStatus.awaiting_review))
    return Overview(
        generated_at=utcnow(),
        queues=queue_rows,
        broker_error=broker_error,
        job_counts=job_counts(session),
        workers=workers(session, report, runtime.settings.job_stale_after_s),
        indexes=indexes(session, runtime),
        awaiting_review=int(awaiting or 0),
        flower_url=flower_url or None,
        review_required=runtime.settings.review_required,
    )


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def job_buckets(
    session: Session, *, minutes: int, bucket_s: int, now: datetime | None = None
) -> list[JobBucket]:
    """Jobs that ended in each interval of the last ``minutes``, by how they ended, with the run
    times (first start to end) of those that ran."""
    now = now or utcnow()
    n = max(1, (minutes * 60) // bucket_s)
    last_start = math.floor(now.timestamp() / bucket_s) * bucket_s
    first_start = last_start - (n - 1) * bucket_s
    since = datetime.fromtimestamp(first_start, UTC)
    counts = [dict.fromkeys(("succeeded", "failed", "cancelled"), 0) for _ in range(n)]
    durations: list[list[float]] = [[] for _ in range(n)]
    for state, started, finished in session.execute(
        select(Job.state, Job.started_at, Job.finished_at).where(
            Job.finished_at.is_not(None), Job.finished_at >= since
        )
    ):
        if finished is None:
            continue
        at = int((finished.timestamp() - first_start) // bucket_s)
        if not 0 <= at < n or JobState(state).value not in counts[at]:
            continue
        counts[at][JobState(state).value] += 1
        if started is not None:
            durations[at].append(max(0.0, (finished - started).total_seconds()))
    return [
        JobBucket(
            start=datetime.fromtimestamp(first_start + i * bucket_s, UTC),
            succeeded=counts[i]["succeeded"],
            failed=counts[i]["failed"],
            cancelled=counts[i]["cancelled"],
            mean_s=round(sum(durations[i]) / len(durations[i]), 3) if durations[i] else None,
            p95_s=_p95(durations[i]),
        )
        for i in range(n)
    ]


def bucket_seconds(minutes: int) -> int:
    """About sixty bars whatever the window, none shorter than ten seconds."""
    return max(10, minutes)


def charts(session: Session, history: RequestHistory, *, minutes: int) -> Charts:
    """Throughput and run times of jobs (from the jobs table) and the API's request rate and
    latency (sampled from this process's Prometheus registry) over the last ``minutes``."""
    bucket_s = bucket_seconds(minutes)
    since = utcnow().timestamp() - minutes * 60
    return Charts(
        minutes=minutes,
        bucket_s=bucket_s,
        jobs=job_buckets(session, minutes=minutes, bucket_s=bucket_s),
        requests=[
            RequestPointRead(
                at=datetime.fromtimestamp(p.at, UTC),
                requests_per_s=round(p.requests / p.seconds, 3) if p.seconds > 0 else 0.0,
                errors=p.errors,
                mean_ms=p.mean_ms,
                p50_ms=p.p50_ms,
                p95_ms=p.p95_ms,
            )
            for p in history.points(since=since)
        ],
    )
