"""Send jobs to the broker only after the transaction that created them commits.

``enqueue`` records the job on the session; a listener on ``after_commit`` sends the messages
(and a rollback drops them), so a worker never sees a job id the database does not have.

A publish can fail after the commit (the broker is down): the job row then says so. Every
dispatch stamps ``dispatched_at`` and clears ``published_at``; only a publish the broker took
sets ``published_at`` again, for that very dispatch. The reaper sends every queued job whose
message the broker never took once the broker answers, whatever it reports for its queues, and
the guarded claim makes a message sent twice run once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from kombu.exceptions import ChannelError
from sqlalchemy import Connection, event, update
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.models import Job
from app.jobs.stages import QUEUES, Stage

log = logging.getLogger(__name__)

_PENDING = "pavedock_pending_jobs"
DISPATCHER = "pavedock_dispatcher"
BROKER_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class JobMessage:
    job_id: int
    stage: Stage
    dispatched_at: datetime | None = None
    """Which dispatch of the job this message carries (its ``dispatched_at``)."""
    countdown: float = 0.0
    """Seconds the worker waits before running it (a retry's back-off)."""


class Dispatcher(Protocol):
    def send(self, message: JobMessage) -> None:
        """Publish one job message (raises if the broker is unreachable)."""
        ...


class CeleryDispatcher:
    """Publishes by task name through a Celery app (no task code imported here)."""

    def __init__(self, celery_app: Any):
        self.celery = celery_app

    def send(self, message: JobMessage) -> None:
        self.celery.send_task(
            message.stage.name,
            args=[message.job_id],
            queue=message.stage.queue,
            routing_key=message.stage.queue,
            countdown=message.countdown or None,
        )


def queue_depths(celery_app: Any, queues: Sequence[str] = QUEUES) -> dict[str, int]:
    """Messages waiting per queue, asked of the broker without creating anything: a passive
    declare, which is an LLEN on Redis and a count of the queue's files on the embedded broker.
    A queue the broker does not know (a Redis list is removed when emptied) holds nothing; a
    broker that cannot be reached raises (it is not a zero)."""
    depths: dict[str, int] = {}
    with celery_app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
        for queue in queues:
            channel = conn.channel()
            try:
                depths[queue] = int(channel.queue_declare(queue=queue, passive=True).message_count)
            except ChannelError:
                depths[queue] = 0
            finally:
                channel.close()
    return depths


def enqueue(session: Session, job: Job, stage: Stage, *, countdown: float = 0.0) -> None:
    """Send ``job`` for ``stage`` once this session's transaction commits (a new dispatch: the
    job counts as unpublished until the broker takes this message)."""
    job.dispatched_at = utcnow()
    job.published_at = None
    session.flush()
    session.info.setdefault(_PENDING, []).append(
        JobMessage(job.id, stage, dispatched_at=job.dispatched_at, countdown=countdown)
    )


@event.listens_for(Session, "after_commit")
def _send_after_commit(session: Session) -> None:
    pending: list[JobMessage] = session.info.pop(_PENDING, [])
    if not pending:
        return
    dispatcher: Dispatcher | None = session.info.get(DISPATCHER)
    if dispatcher is None:
        log.error("jobs %s committed on a session without a dispatcher", [m.job_id for m in pending])
        return
    sent: list[JobMessage] = []
    for message in pending:
        try:
            dispatcher.send(message)
        except Exception as exc:
            # The row stays unpublished; the reaper sends it once the broker answers.
            log.warning(
                "could not publish job %s (%s: %s); it is sent again once the broker answers",
                message.job_id,
                type(exc).__name__,
                exc,
            )
            continue
        sent.append(message)
    if sent:
        _mark_published(session, sent)


def _mark_published(session: Session, sent: list[JobMessage]) -> None:
    """Record that the broker took these messages, each for the dispatch it carries (a job that
    was dispatched again since keeps its new dispatch unpublished). In a transaction of its own:
    the session's has just ended."""
    bind = session.get_bind()
    engine = bind.engine if isinstance(bind, Connection) else bind
    now = utcnow()
    try:
        with engine.begin() as conn:
            for message in sent:
                conn.execute(
                    update(Job)
                    .where(
                        Job.id == message.job_id,
                        Job.dispatched_at == message.dispatched_at,
                        Job.published_at.is_(None),
                    )
                    .values(published_at=now)
                )
    except Exception:
        # Harmless: the reaper sends these jobs once more and the guarded claim drops the extra.
        log.warning(
            "jobs %s were published but could not be marked so", [m.job_id for m in sent], exc_info=True
        )


@event.listens_for(Session, "after_rollback")
def _drop_after_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)
