"""Send jobs to the broker only after the transaction that created them commits.

``enqueue`` records the job on the session; a listener on ``after_commit`` sends the messages
(and a rollback drops them), so a worker never sees a job id the database does not have.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kombu.exceptions import ChannelError
from sqlalchemy import event
from sqlalchemy.orm import Session

from app.jobs.stages import QUEUES, Stage

log = logging.getLogger(__name__)

_PENDING = "pavedock_pending_jobs"
DISPATCHER = "pavedock_dispatcher"
BROKER_TIMEOUT_S = 2.0


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
