"""A thread that runs the reaper periodically (in every worker and every API process: the
guarded updates make concurrent reapers safe)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import timedelta

from app.jobs import service
from app.jobs.dispatch import queue_depths
from app.runtime import Runtime

log = logging.getLogger(__name__)


def reap_once(runtime: Runtime) -> service.ReapReport:
    settings = runtime.settings
    waiting: Mapping[str, int] | None = None
    try:
        waiting = queue_depths(runtime.celery)
    except Exception as exc:  # broker unreachable: nothing can be sent now
        log.info("reaper: broker unreachable (%s: %s); sends wait for it", type(exc).__name__, exc)
    with runtime.db.session() as session:
        report = service.reap(
            session,
            stale_after=timedelta(seconds=settings.job_stale_after_s),
            redispatch_after=timedelta(seconds=settings.job_redispatch_after_s),
            republish_after=timedelta(seconds=settings.job_republish_after_s),
            waiting=waiting,
            broker_up=waiting is not None,
        )
    if report.requeued or report.failed or report.redispatched or report.republished:
        log.warning(
            "reaper: re-queued %s, failed %s, re-sent %s (message lost), %s (never published)",
            report.requeued,
            report.failed,
            report.redispatched,
            report.republished,
        )
    return report


class Reaper(threading.Thread):
    def __init__(self, runtime: Runtime):
        super().__init__(name="pavedock-reaper", daemon=True)
        self.runtime = runtime
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            try:
                reap_once(self.runtime)
            except Exception:
                log.warning("reaper pass failed; will try again", exc_info=True)
            try:  # learnwares stamped while a shared vector engine was down are applied here
                self.runtime.indexes.catch_up()
            except Exception as exc:
                log.info("vector engine catch-up: %s; will try again", exc)
            if self.stopped.wait(self.runtime.settings.reaper_interval_s):
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)
