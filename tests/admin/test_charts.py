"""The charts' numbers: jobs ended per interval and their run times from the jobs table, and
request rate and latency quantiles from the Prometheus registry the API really fills."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from app.admin.monitor import RequestHistory, RequestSample, histogram_quantile, request_point
from app.admin.service import job_buckets
from app.db.models import Job, JobState
from app.runtime import Runtime
from tests.admin.conftest import failed_job, running_job
from tests.fixtures.service import Keys

BOUNDS = (0.01, 0.1, 1.0, math.inf)


def test_quantiles_interpolate_inside_the_bucket_like_prometheus() -> None:
    # 10 requests under 10 ms, 10 between 10 and 100 ms, none slower.
    cumulative = (10.0, 20.0, 20.0, 20.0)
    assert histogram_quantile(0.5, BOUNDS, cumulative) == pytest.approx(0.01)
    assert histogram_quantile(0.25, BOUNDS, cumulative) == pytest.approx(0.005)
    assert histogram_quantile(0.95, BOUNDS, cumulative) == pytest.approx(0.01 + 0.09 * 0.9)
    # In the +inf bucket the largest finite bound is all one can say.
    assert histogram_quantile(0.99, BOUNDS, (0.0, 0.0, 0.0, 5.0)) == 1.0
    assert histogram_quantile(0.5, BOUNDS, (0.0, 0.0, 0.0, 0.0)) is None


def test_a_point_is_the_difference_of_two_samples() -> None:
    before = RequestSample(100.0, 10, 0.5, 0, BOUNDS, (5, 10, 10, 10))
    after = RequestSample(110.0, 30, 1.7, 2, BOUNDS, (5, 30, 30, 30))
    point = request_point(before, after)
    assert (point.requests, point.errors, point.seconds) == (20, 2, 10.0)
    assert point.mean_ms == pytest.approx(60.0)
    assert point.p50_ms == pytest.approx(1000 * (0.01 + 0.09 * 0.5))
    idle = request_point(after, RequestSample(120.0, 30, 1.7, 2, BOUNDS, (5, 30, 30, 30)))
    assert (idle.requests, idle.mean_ms, idle.p95_ms) == (0, None, None)


def test_the_history_counts_api_traffic_but_not_the_dashboard(client: TestClient, keys: Keys) -> None:
    history = RequestHistory(size=10)
    history.sample()
    for _ in range(5):
        assert client.get("/v1/spec-spaces", headers=keys.auth("user")).status_code == 200
    client.get("/v1/learnwares/999999", headers=keys.auth("user"))
    for _ in range(3):
        client.get("/v1/admin/overview", headers=keys.auth("admin"))
        client.get("/healthz")
    history.sample()
    [point] = history.points()
    assert point.requests == 6 and point.errors == 0
    assert point.p50_ms is not None and point.p95_ms is not None and point.p95_ms >= point.p50_ms > 0


def _end(runtime: Runtime, job_id: int, state: JobState, started: datetime, run_s: float) -> None:
    with runtime.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.state, job.started_at, job.finished_at = state, started, started + timedelta(seconds=run_s)


def test_jobs_are_bucketed_by_when_they_ended(runtime: Runtime, client: TestClient) -> None:
    now = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
    minute = now.replace(second=0)  # the current bucket starts here
    for run_s in (2.0, 4.0, 12.0):
        job_id = running_job(runtime, worker="w", progress=1.0, message="done")
        _end(
            runtime,
            job_id,
            JobState.succeeded,
            minute - timedelta(seconds=run_s) + timedelta(seconds=10),
            run_s,
        )
    failed = failed_job(runtime, worker="w", reason="bad input")
    _end(runtime, failed, JobState.failed, minute - timedelta(minutes=2), 1.0)
    too_old = failed_job(runtime, worker="w", reason="long ago")
    _end(runtime, too_old, JobState.failed, minute - timedelta(minutes=30), 1.0)
    with runtime.db.session() as session:
        buckets = job_buckets(session, minutes=5, bucket_s=60, now=now)
    assert [b.start for b in buckets] == [minute - timedelta(minutes=4 - i) for i in range(5)]
    current, two_ago = buckets[-1], buckets[-3]
    assert (current.succeeded, current.failed) == (3, 0)
    assert current.mean_s == pytest.approx(6.0) and current.p95_s == pytest.approx(12.0)
    assert (two_ago.succeeded, two_ago.failed, two_ago.mean_s) == (0, 1, 1.0)
    assert sum(b.failed for b in buckets) == 1


def test_the_charts_endpoint(client: TestClient, keys: Keys, runtime: Runtime) -> None:
    job_id = failed_job(runtime, worker="w", reason="broken")
    client.get("/v1/spec-spaces", headers=keys.auth("user"))
    time.sleep(0.5)  # the sampler runs every 0.2 s in these tests
    body = client.get("/v1/admin/charts?minutes=15", headers=keys.auth("admin")).json()
    assert (body["minutes"], body["bucket_s"], len(body["jobs"])) == (15, 15, 60)
    assert sum(b["failed"] for b in body["jobs"]) == 1, job_id
    assert body["requests"] and all(p["requests_per_s"] >= 0 for p in body["requests"])
    assert client.get("/v1/admin/charts?minutes=1", headers=keys.auth("admin")).status_code == 422
