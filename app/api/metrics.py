"""Prometheus metrics: requests (counted by a middleware), and the dock's state read at scrape
time (jobs by state, queue depth, index size, learnwares by status) by a collector."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.db.base import utcnow
from app.db.models import Job, JobState, Learnware, SpecSpaceRecord
from app.jobs.dispatch import queue_depths
from app.jobs.stages import QUEUES
from app.runtime import Runtime

log = logging.getLogger(__name__)

REQUESTS = Counter("pavedock_http_requests", "HTTP requests", ["method", "route", "status"])
LATENCY = Histogram(
    "pavedock_http_request_duration_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


class RequestMetrics:
    """ASGI middleware counting requests by route template (not raw path: ids would explode)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            REQUESTS.labels(scope["method"], route, str(status)).inc()
            LATENCY.labels(scope["method"], route).observe(time.perf_counter() - started)


class DockCollector(Collector):
    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("pavedock_jobs", "Jobs by kind and state", labels=["kind", "state"])
        stale = GaugeMetricFamily("pavedock_jobs_stale", "Running jobs whose heartbeat is overdue")
        oldest = GaugeMetricFamily("pavedock_oldest_queued_job_seconds", "Age of the oldest queued job")
        unpublished = GaugeMetricFamily(
            "pavedock_jobs_unpublished", "Queued jobs whose message the broker has not taken yet"
        )
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
            unpublished.add_metric(
                [],
                session.scalar(
                    select(func.count()).where(Job.state == JobState.queued, Job.published_at.is_(None))
                )
                or 0,
            )
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
            for queue, waiting in queue_depths(self.runtime.celery, QUEUES).items():
                depth.add_metric([queue], waiting)
        except Exception as exc:
            log.warning("queue depth unavailable: %s", exc)
        yield from (jobs, stale, oldest, unpublished, learnwares, version, size, depth)


def render(runtime: Runtime) -> bytes:
    """The process metrics (requests, Python runtime) and the dock's state, in text format."""
    from prometheus_client import REGISTRY

    dock = CollectorRegistry(auto_describe=False)
    dock.register(DockCollector(runtime))
    return generate_latest(REGISTRY) + generate_latest(dock)
