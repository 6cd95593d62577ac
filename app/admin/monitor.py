"""What the dashboard samples in the background of an API process.

- ``RequestHistory``: the request counter and latency histogram of the Prometheus registry
  (``app.api.metrics``), sampled at an interval, so the page can chart requests per second and
  latency quantiles over time (Prometheus itself keeps no history).
- ``WorkerInspector``: asks the Celery workers what they run (a remote-control broadcast), in a
  thread, only while a dashboard is open, so no request ever waits on the broker.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from app.api.metrics import LATENCY, REQUESTS
from app.db.base import utcnow

log = logging.getLogger(__name__)

# The dock's API traffic is charted: not the admin pages and API (the dashboard polls them),
# probes, scrapes, nor event streams (open for a job's whole run, they are not latencies).
_NOT_TRAFFIC_PREFIXES = ("/admin", "/v1/admin")
_NOT_TRAFFIC_ROUTES = frozenset({"/metrics", "/healthz", "/readyz"})


def is_api_traffic(route: str) -> bool:
    return (
        route not in _NOT_TRAFFIC_ROUTES
        and not route.startswith(_NOT_TRAFFIC_PREFIXES)
        and not route.endswith("/events")
    )


@dataclass(frozen=True)
class RequestSample:
    """Cumulative counts at one moment, summed over the API's routes."""

    at: float
    """Unix time."""
    count: float
    seconds: float
    """Sum of the request durations."""
    errors: float
    """Responses with a 5xx status."""
    bounds: tuple[float, ...]
    """The histogram's upper bounds, ascending, ending with +inf."""
    cumulative: tuple[float, ...]
    """Requests at or under each bound."""


@dataclass(frozen=True)
class RequestPoint:
    """The requests between two samples."""

    at: float
    seconds: float
    """Length of the interval."""
    requests: int
    errors: int
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None


def _samples(metric: MetricWrapperBase) -> Iterable[Any]:
    for family in metric.collect():
        yield from family.samples


def read_request_sample(at: float | None = None) -> RequestSample:
    """The registry's request metrics now, over the API traffic only."""
    buckets: dict[float, float] = {}
    count = seconds = errors = 0.0
    for sample in _samples(LATENCY):
        if not is_api_traffic(sample.labels.get("route", "")):
            continue
        if sample.name.endswith("_bucket"):
            bound = float(sample.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
        elif sample.name.endswith("_count"):
            count += sample.value
        elif sample.name.endswith("_sum"):
            seconds += sample.value
    for sample in _samples(REQUESTS):
        if (
            sample.name.endswith("_total")
            and is_api_traffic(sample.labels.get("route", ""))
            and sample.labels.get("status", "").startswith("5")
        ):
            errors += sample.value
    bounds = tuple(sorted(buckets)) or (math.inf,)
    return RequestSample(
        at=time.time() if at is None else at,
        count=count,
        seconds=seconds,
        errors=errors,
        bounds=bounds,
        cumulative=tuple(buckets.get(b, 0.0) for b in bounds),
    )


def histogram_quantile(q: float, bounds: tuple[float, ...], cumulative: tuple[float, ...]) -> float | None:
    """Prometheus's estimate: linear interpolation inside the bucket holding the q-th request;
    a quantile in the +inf bucket is reported as the largest finite bound."""
    if not cumulative or cumulative[-1] <= 0:
        return None
    target = q * cumulative[-1]
    below_count, below_bound = 0.0, 0.0
    for bound, at_or_under in zip(bounds, cumulative, strict=True):
        if at_or_under >= target:
            if math.isinf(bound):
                return below_bound
            inside = at_or_under - below_count
            share = (target - below_count) / inside if inside > 0 else 1.0
            return below_bound + (bound - below_bound) * share
        below_count, below_bound = at_or_under, bound
    return below_bound


def request_point(before: RequestSample, after: RequestSample) -> RequestPoint:
    requests = after.count - before.count
    if requests <= 0:
        return RequestPoint(after.at, after.at - before.at, 0, 0, None, None, None)
    # A bound missing before had no request yet (a route's series appears with its first one).
    earlier = dict(zip(before.bounds, before.cumulative, strict=True))
    deltas = tuple(n - earlier.get(b, 0.0) for b, n in zip(after.bounds, after.cumulative, strict=True))

    def ms(value: float | None) -> float | None:
        return None if value is None else round(1000 * value, 2)

    return RequestPoint(
        at=after.at,
        seconds=after.at - before.at,
        requests=round(requests),
        errors=round(after.errors - before.errors),
        mean_ms=ms((after.seconds - before.seconds) / requests),
        p50_ms=ms(histogram_quantile(0.5, after.bounds, deltas)),
        p95_ms=ms(histogram_quantile(0.95, after.bounds, deltas)),
    )


class RequestHistory:
    """The last ``size`` samples; points are the differences between neighbours."""

    def __init__(self, size: int, read: Callable[[], RequestSample] = read_request_sample):
        self.read = read
        self._samples: deque[RequestSample] = deque(maxlen=size)
        self._lock = threading.Lock()

    def sample(self) -> None:
        taken = self.read()
        with self._lock:
            self._samples.append(taken)

    def points(self, since: float | None = None) -> list[RequestPoint]:
        with self._lock:
            samples = list(self._samples)
        points = [request_point(a, b) for a, b in itertools.pairwise(samples)]
        return [p for p in points if since is None or p.at >= since]


@dataclass(frozen=True)
class WorkerReport:
    """The workers that answered a broadcast, and the job ids of the tasks each is running."""

    at: datetime
    active: dict[str, list[int]]
    error: str | None = None


def _job_ids(tasks: Iterable[dict[str, Any]]) -> list[int]:
    ids = []
    for task in tasks:
        args = task.get("args") or []
        if args and isinstance(args[0], int):
            ids.append(args[0])
    return ids


class WorkerInspector:
    """Asks the workers ``inspect active`` in a thread, at most every ``interval_s`` and only
    while the report is being read (a dashboard open), and keeps the last answer."""

    IDLE_AFTER_S = 60.0

    def __init__(self, celery_app: Any, *, timeout_s: float, interval_s: float):
        self.celery = celery_app
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self._report: WorkerReport | None = None
        self._wanted_at = -math.inf
        self._asked_at = -math.inf
        self._wake = threading.Event()
        self._lock = threading.Lock()

    def report(self) -> WorkerReport | None:
        """The last answer (None before the first); wakes the thread if it is due for another."""
        now = time.monotonic()
        with self._lock:
            self._wanted_at = now
            due = now - self._asked_at >= self.interval_s
            report = self._report
        if due:
            self._wake.set()
        return report

    def ask(self) -> WorkerReport:
        """One broadcast: every worker that answers in time, with what it runs."""
        self._asked_at = time.monotonic()
        try:
            replies = self.celery.control.inspect(timeout=self.timeout_s).active() or {}
            report = WorkerReport(
                at=utcnow(), active={name: _job_ids(tasks or []) for name, tasks in replies.items()}
            )
        except Exception as exc:
            log.warning("workers could not be asked what they run: %s", exc)
            report = WorkerReport(at=utcnow(), active={}, error=f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._report = report
        return report

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wake.wait(timeout=self.interval_s)
            self._wake.clear()
            if stop.is_set():
                return
            now = time.monotonic()
            if now - self._wanted_at < self.IDLE_AFTER_S and now - self._asked_at >= self.interval_s:
                self.ask()

    def wake(self) -> None:
        self._wake.set()


class AdminMonitor:
    """The request sampler and the worker inspector of one API process, each in its thread."""

    def __init__(self, history: RequestHistory, inspector: WorkerInspector, sample_interval_s: float):
        self.history = history
        self.inspector = inspector
        self.sample_interval_s = sample_interval_s
        self._stop = threading.Event()
        self._sampler = threading.Thread(
            target=self._sample_forever, name="admin-request-sampler", daemon=True
        )
        self._asker = threading.Thread(
            target=self.inspector.run, args=(self._stop,), name="admin-worker-inspector", daemon=True
        )

    def _sample_forever(self) -> None:
        self.history.sample()
        while not self._stop.wait(self.sample_interval_s):
            self.history.sample()

    def start(self) -> None:
        self._sampler.start()
        self._asker.start()

    def stop(self) -> None:
        """Stop both threads. A broadcast in flight is not waited for: it ends by its own
        timeout, and its thread (a daemon) then sees the stop."""
        self._stop.set()
        self.inspector.wake()
        if self._sampler.is_alive():
            self._sampler.join(timeout=1.0)
        if self._asker.is_alive():
            self._asker.join(timeout=0.05)
