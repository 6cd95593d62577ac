"""Run one stage of a job in a worker: claim it, keep its heartbeat, report progress, and record
how it ended. The Celery tasks in ``workers/`` are one call to ``run_stage``.

- a dock error (bad package, incompatible spec, bad input) fails the job with its reason, no retry;
- a transient error (database or broker connection, timeout) gives the job back and raises
  ``RetryLater`` so Celery re-sends it (up to the job's max attempts);
- anything else fails the job with the exception as its reason (not retried: it would fail again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from botocore.exceptions import ConnectionError as BotoConnectionError
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError

from app.db.models import Job
from app.errors import DockError, InputError
from app.jobs import service
from app.jobs.service import Claim, JobLost
from app.jobs.stages import Stage
from app.ml.progress import Progress
from app.runtime import Runtime

log = logging.getLogger(__name__)

# Errors that say "try again later": the database, the broker or the store could not be reached.
TRANSIENT: tuple[type[BaseException], ...] = (
    OperationalError,
    DisconnectionError,
    KombuOperationalError,
    BotoConnectionError,
    ConnectionError,
    TimeoutError,
)


class RetryLater(Exception):
    """A transient error: the job was given back and should be re-sent after ``countdown``."""

    def __init__(self, reason: str, countdown: float):
        super().__init__(reason)
        self.countdown = countdown


@dataclass
class JobContext:
    """What a stage function gets: the runtime, its claim, the job's subject ids, reporting."""

    runtime: Runtime
    claim: Claim
    kind: str
    learnware_id: int | None
    task_id: int | None
    space_id: str | None
    owner_id: int | None
    attempt: int
    _lost: threading.Event = field(default_factory=threading.Event)
    _last_report: float = 0.0

    def check(self) -> None:
        """Raise JobLost if the heartbeat found the job taken away (re-queued or cancelled)."""
        if self._lost.is_set():
            raise JobLost(f"job {self.claim.job_id} was taken from this run")

    def progress(self, fraction: float, message: str, *, force: bool = False) -> None:
        """Record progress (at most twice a second unless ``force``); raises JobLost."""
        self.check()
        now = time.monotonic()
        if not force and now - self._last_report < 0.5:
            return
        self._last_report = now
        with self.runtime.db.session() as session:
            service.heartbeat(session, self.claim, progress=fraction, message=message)

    def log(self, *lines: str) -> None:
        self.check()
        with self.runtime.db.session() as session:
            service.append_log(session, self.claim, *lines)
        for line in lines:
            log.info("job %s: %s", self.claim.job_id, line)

    def scaled(self, start: float, end: float, label: str) -> Progress:
        """A progress callback for the ML core (``step, total, message``) mapped onto [start, end]."""

        def report(step: int, total: int, message: str) -> None:
            self.progress(
                start + (end - start) * step / max(total, 1), f"{label}: {message} ({step}/{total})"
            )

        return report


StageFn = Callable[[JobContext], None]
"""A stage's work. It ends by calling ``service.advance`` or ``service.succeed`` in its last
transaction, and raises a DockError to fail the job with a reason. It reports progress and log
lines between its transactions, never inside one (they use their own connection)."""


class _Heartbeat(threading.Thread):
    def __init__(self, ctx: JobContext, interval: float):
        super().__init__(name=f"heartbeat-{ctx.claim.job_id}", daemon=True)
        self.ctx = ctx
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                with self.ctx.runtime.db.session() as session:
                    service.heartbeat(session, self.ctx.claim)
            except JobLost:
                self.ctx._lost.set()
                return
            except Exception:
                log.warning(
                    "heartbeat of job %s failed; will try again", self.ctx.claim.job_id, exc_info=True
                )

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=5)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, DockError) else f"internal error: {type(exc).__name__}: {text}"


def run_stage(runtime: Runtime, job_id: int, stage: Stage, fn: StageFn, *, worker: str) -> str:
    """Run ``fn`` for one delivery of (job, stage). Returns what happened (for the task's log)."""
    settings = runtime.settings
    with runtime.db.session() as session:
        claimed = service.claim(
            session, job_id, stage.name, worker, timedelta(seconds=settings.job_stale_after_s)
        )
        job = session.get(Job, job_id) if claimed else None
        snapshot: dict[str, Any] = (
            {
                "kind": job.kind,
                "learnware_id": job.learnware_id,
                "task_id": job.task_id,
                "space_id": job.space_id,
                "owner_id": job.owner_id,
            }
            if job
            else {}
        )
    if claimed is None:
        log.info(
            "job %s: %s not claimable here (done, running elsewhere or moved on); skipped", job_id, stage.name
        )
        return "skipped"
    ctx = JobContext(runtime=runtime, claim=claimed, attempt=claimed.attempt, **snapshot)
    beat = _Heartbeat(ctx, settings.job_heartbeat_s)
    beat.start()
    try:
        fn(ctx)
        return "done"
    except JobLost as exc:
        log.warning("job %s: %s", job_id, exc)
        return "lost"
    except TRANSIENT as exc:
        reason = _reason(exc)
        log.warning("job %s: transient error in %s: %s", job_id, stage.name, reason)
        try:
            with runtime.db.session() as session:
                service.release_for_retry(session, claimed, reason)
        except Exception:
            log.warning("job %s: could not give the job back; the reaper will", job_id, exc_info=True)
        raise RetryLater(reason, countdown=min(60.0, 2.0 * 2 ** (claimed.attempt - 1))) from exc
    except Exception as exc:  # a dock error (the input's fault) or a bug: fail with the reason
        reason = _reason(exc)
        if not isinstance(exc, DockError | DBAPIError):
            log.exception("job %s: %s failed", job_id, stage.name)
        with runtime.db.session() as session:
            service.fail(session, job_id, claimed.attempt, reason, rejected=isinstance(exc, InputError))
        return "failed"
    finally:
        beat.stop()
