"""Jobs published while the broker is down are sent once it is back: a real redis-server of the
test's own is stopped and started. The job row records whether the broker took its message; the
reaper sends those it never took, whatever the broker says about its (empty) queues."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.db.models import Job
from app.jobs.dispatch import queue_depths
from app.jobs.reaper import reap_once
from app.jobs.stages import QUEUES
from app.main import create_app
from app.runtime import Runtime
from app.settings import Settings
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.service import Keys, empty_tables
from workers.celery_app import make_celery


@pytest.fixture
def redis_runtime(settings: Settings, redis_server: RedisServer) -> Iterator[Runtime]:
    """The dock's runtime with Redis as its broker; its reaper runs every half second."""
    on_redis = settings.model_copy(
        update={"broker_url": redis_server.url, "reaper_interval_s": 0.5, "job_republish_after_s": 1.0}
    )
    rt = Runtime.create(on_redis, persist_index=True)
    try:
        yield rt
    finally:
        empty_tables(rt)
        rt.db.dispose()


@pytest.fixture
def redis_client(redis_runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime=redis_runtime)) as test_client:
        yield test_client


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not {what} after {timeout:.0f} s")


def published_at(runtime: Runtime, job_id: int) -> object:
    with runtime.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.published_at


def test_an_empty_redis_queue_holds_nothing(redis_server: RedisServer) -> None:
    """Redis removes an emptied list, and a passive declare of it answers NOT_FOUND: zero."""
    celery = make_celery(Settings(environment="testing", broker_url=redis_server.url))
    assert queue_depths(celery, QUEUES) == {"gpu": 0, "cpu": 0}
    celery.send_task("index.rebuild", args=[1], queue="cpu", routing_key="cpu")
    assert queue_depths(celery, QUEUES) == {"gpu": 0, "cpu": 1}
    assert redis_server.client().lpop("cpu") is not None
    assert queue_depths(celery, QUEUES) == {"gpu": 0, "cpu": 0}


def test_a_job_submitted_while_redis_is_down_is_sent_once_it_is_back(
    redis_server: RedisServer,
    redis_runtime: Runtime,
    redis_client: TestClient,
    keys: Keys,
    tfidf_packages: dict[str, Path],
) -> None:
    def submit(name: str) -> int:
        response = redis_client.post(
            "/v1/learnwares",
            headers=keys.auth("developer"),
            files={"package": (f"{name}.zip", tfidf_packages[name].read_bytes(), "application/zip")},
        )
        assert response.status_code == 202, response.text
        return int(response.json()["job_id"])

    before = submit("sst2")
    assert published_at(redis_runtime, before) is not None
    assert redis_server.client().llen("cpu") == 1

    redis_server.stop()
    during = submit("trec")  # the commit stands; the publish fails
    assert published_at(redis_runtime, during) is None
    time.sleep(2.0)  # reaper passes while the broker is down send nothing and fail nothing
    assert published_at(redis_runtime, during) is None
    with redis_runtime.db.session() as session:
        job = session.get(Job, during)
        assert job is not None and job.state.value == "queued"

    redis_server.start()  # the first message is still there (append-only file); nothing else
    assert redis_server.client().llen("cpu") == 1
    wait_for(lambda: published_at(redis_runtime, during) is not None, 20, "sent")
    assert redis_server.client().llen("cpu") == 2
    with redis_runtime.db.session() as session:
        job = session.get(Job, during)
        assert job is not None and any("sent again" in line for line in job.log)
    # Once taken, it is not sent again (its message waits for a worker).
    time.sleep(2.0)
    assert redis_server.client().llen("cpu") == 2
    report = reap_once(redis_runtime)
    assert report.republished == [] and report.redispatched == []


def test_a_transient_error_gives_the_job_back_through_the_dispatcher(
    runtime: Runtime, client: TestClient, keys: Keys, tfidf_packages: dict[str, Path]
) -> None:
    """The retry is sent like any dispatch: recorded as published only once the broker took it."""
    from app.jobs.runner import JobContext, run_stage
    from app.jobs.stages import VALIDATE_LEARNWARE
    from tests.fixtures.service import broker_messages

    response = client.post(
        "/v1/learnwares",
        headers=keys.auth("developer"),
        files={"package": ("p.zip", tfidf_packages["sst2"].read_bytes(), "application/zip")},
    )
    job_id = int(response.json()["job_id"])
    sent = broker_messages(runtime)

    def database_went_away(ctx: JobContext) -> None:
        raise ConnectionError("connection reset by peer")

    assert run_stage(runtime, job_id, VALIDATE_LEARNWARE, database_went_away, worker="w1") == "retry"
    assert broker_messages(runtime) == sent + 1
    with runtime.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.state.value == "queued" and job.attempts == 1
        assert job.published_at is not None and "transient error, will retry in 2 s" in job.message
