"""Send jobs to the broker only after the transaction that created them commits.

``enqueue`` records the job on the session; a listener on ``after_commit`` sends the messages
(and a rollback drops them), so a worker never sees a job id the database does not have.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import event
from sqlalchemy.orm import Session

from app.jobs.stages import Stage

log = logging.getLogger(__name__)

_PENDING = "pavedock_pending_jobs"
DISPATCHER = "pavedock_dispatcher"


@dataclass(frozen=True)
class JobMessage:
    job_id: int
    stage: Stage


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
        )


def queue_depths(celery_app: Any, queues: tuple[str, ...]) -> dict[str, int | None]:
    """Messages waiting per queue, asked of the broker (a passive declare creates nothing);
    None where the broker could not say."""
    depths: dict[str, int | None] = {}
    with celery_app.connection_for_read() as conn:
        channel = conn.default_channel
        for queue in queues:
            try:
                depths[queue] = int(channel.queue_declare(queue=queue, passive=True).message_count)
            except Exception:
                depths[queue] = None
    return depths


def enqueue(session: Session, job_id: int, stage: Stage) -> None:
    """Send ``job_id`` for ``stage`` once this session's transaction commits."""
    session.info.setdefault(_PENDING, []).append(JobMessage(job_id, stage))


@event.listens_for(Session, "after_commit")
def _send_after_commit(session: Session) -> None:
    pending: list[JobMessage] = session.info.pop(_PENDING, [])
    if not pending:
        return
    dispatcher: Dispatcher | None = session.info.get(DISPATCHER)
    if dispatcher is None:
        log.error("jobs %s committed on a session without a dispatcher", [m.job_id for m in pending])
        return
    for message in pending:
        try:
            dispatcher.send(message)
        except Exception:
            # The row says queued; the reaper re-sends jobs nobody claimed (job_redispatch_after_s).
            log.exception("could not publish job %s; the reaper will re-send it", message.job_id)


@event.listens_for(Session, "after_rollback")
def _drop_after_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)
