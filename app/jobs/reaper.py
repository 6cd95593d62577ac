"""A thread that runs the reaper periodically (in every worker and every API process: the
guarded updates make concurrent reapers safe)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import timedelta

from app.jobs import service
from app.jobs.dispatch import queue_depths
from app.jobs.stages import QUEUES
from app.runtime import Runtime

log = logging.getLogger(__name__)


def reap_once(runtime: Runtime) -> service.ReapReport:
    settings = runtime.settings
    try:
        waiting: Mapping[str, int | None] = queue_depths(runtime.celery)
    except Exception:  # broker unreachable: do not re-send blindly
        waiting = dict.fromkeys(QUEUES)
    with runtime.db.session() as session:
        report = service.reap(
            session,
            stale_after=timedelta(seconds=settings.job_stale_after_s),
            redispatch_after=timedelta(seconds=settings.job_redispatch_after_s),
            waiting=waiting,
        )
    if report.requeued or report.failed or report.redispatched:
        log.warning(
            "reaper: re-queued %s, failed %s, re-sent %s", report.requeued, report.failed, report.redispatched
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
            if self.stopped.wait(self.runtime.settings.reaper_interval_s):
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)
