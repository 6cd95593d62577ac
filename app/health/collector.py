"""The dock's state for Prometheus, read at scrape time: jobs by kind and state, stale jobs, the
oldest queued job, learnwares by status, index version and size per space, broker queue depth."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.db.base import utcnow
from app.db.models import Job, JobState, Learnware, SpecSpaceRecord
from app.jobs.dispatch import queue_depths
from app.runtime import Runtime

log = logging.getLogger(__name__)


class DockCollector(Collector):
    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("pavedock_jobs", "Jobs by kind and state", labels=["kind", "state"])
        stale = GaugeMetricFamily("pavedock_jobs_stale", "Running jobs whose heartbeat is overdue")
        oldest = GaugeMetricFamily("pavedock_oldest_queued_job_seconds", "Age of the oldest queued job")
        learnwares = GaugeMetricFamily("pavedock_learnwares", "Learnwares by status", labels=["status"])
        version = GaugeMetricFamily(
            "pavedock_index_version", "Index version in the database", labels=["space"]
        )
        size = GaugeMetricFamily("pavedock_index_size", "Specs in this process's index", labels=["space"])
        depth = GaugeMetricFamily("pavedock_queue_depth", "Messages waiting in the broker", labels=["queue"])
        now = utcnow()
        with self.runtime.db.session() as session:
            for kind, state, count in session.execute(
                select(Job.kind, Job.state, func.count()).group_by(Job.kind, Job.state)
            ):
                jobs.add_metric([kind, JobState(state).value], count)
            overdue = now.timestamp() - self.runtime.settings.job_stale_after_s
            stale_count = 0
            for (beat,) in session.execute(select(Job.heartbeat_at).where(Job.state == JobState.running)):
                if beat is None or beat.timestamp() < overdue:
                    stale_count += 1
            stale.add_metric([], stale_count)
            first = session.scalar(select(func.min(Job.created_at)).where(Job.state == JobState.queued))
            oldest.add_metric([], (now - first).total_seconds() if first else 0.0)
            for status, count in session.execute(
                select(Learnware.status, func.count()).group_by(Learnware.status)
            ):
                learnwares.add_metric([str(getattr(status, "value", status))], count)
            for space_id, index_version in session.execute(
                select(SpecSpaceRecord.id, SpecSpaceRecord.index_version)
            ):
                version.add_metric([space_id], index_version)
        for info in self.runtime.indexes.loaded():
            size.add_metric([info.space_id], info.size)
        try:
            for queue, waiting in queue_depths(self.runtime.celery).items():
                depth.add_metric([queue], waiting)
        except Exception as exc:
            log.warning("queue depth unavailable: %s", exc)
        yield from (jobs, stale, oldest, learnwares, version, size, depth)


def render(runtime: Runtime) -> bytes:
    """The process metrics (requests, Python runtime) and the dock's state, in text format."""
    from prometheus_client import REGISTRY

    dock = CollectorRegistry(auto_describe=False)
    dock.register(DockCollector(runtime))
    return generate_latest(REGISTRY) + generate_latest(dock)
