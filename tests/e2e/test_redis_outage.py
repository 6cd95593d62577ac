"""A Redis outage strands nothing: uvicorn, a CPU and a GPU-queue Celery worker and a
redis-server of the test's own (PostgreSQL when PAVEDOCK_TEST_POSTGRES_URL is set, SQLite
otherwise). Redis is stopped for 10 s while learnwares are validated and fitted and while new
learnwares and few-shot tasks are submitted; once it is back every job ends, each stage of each
job ran once, and each learnware is indexed once."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.client import DockClient
from app.db.migrate import upgrade
from app.db.models import Job, JobState
from app.db.session import Database
from app.ml.data import few_shot, load_task
from tests.e2e.conftest import TEST_ENV, Processes, free_port, uvicorn_proc, wait_ready, worker_proc
from tests.e2e.test_production_stack import make_key
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.service import migrated_postgres

pytestmark = pytest.mark.e2e

POSTGRES_URL = os.environ.get("PAVEDOCK_TEST_POSTGRES_URL")
OUTAGE_S = 10.0


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated database: PostgreSQL if one is given, else a SQLite file."""
    if not POSTGRES_URL:
        url = f"sqlite:///{tmp_path / 'dock.sqlite'}"
        upgrade(url)
        yield url
        return
    with migrated_postgres(POSTGRES_URL, "pavedock_outage") as url:
        yield url


def jobs(database_url: str) -> list[Job]:
    db = Database(database_url)
    try:
        with db.session() as session:
            rows = list(session.scalars(select(Job).order_by(Job.id)))
            session.expunge_all()
            return rows
    finally:
        db.dispose()


def wait_until(database_url: str, what: str, done: object, timeout: float) -> list[Job]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = jobs(database_url)
        if callable(done) and done(rows):
            return rows
        time.sleep(0.3)
    states = {row.id: (row.kind, row.stage, row.state.value, row.message) for row in jobs(database_url)}
    raise AssertionError(f"not {what} after {timeout:.0f} s: {states}")


ATTEMPT = re.compile(r"attempt (\d+)/\d+ of (\S+) on ")


def test_every_job_ends_once_after_a_redis_outage(
    database_url: str,
    redis_server: RedisServer,
    processes: Processes,
    tfidf_packages: dict[str, Path],
    datasets_dir: Path,
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        **TEST_ENV,
        "PAVEDOCK_ENVIRONMENT": "testing",
        "PAVEDOCK_DATABASE_URL": database_url,
        "PAVEDOCK_BROKER_URL": redis_server.url,
        "PAVEDOCK_DATA_DIR": str(tmp_path / "data"),
        "PAVEDOCK_JOB_REPUBLISH_AFTER_S": "2",
        "PAVEDOCK_SHOT_CHECK_K": "0",
    }
    logs = tmp_path / "logs"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = processes.start(uvicorn_proc("api", env, port, logs / "api.log"))
    processes.start(worker_proc("cpu", env, "cpu", logs / "worker-cpu.log"))
    processes.start(worker_proc("gpu", env, "gpu", logs / "worker-gpu.log"))
    wait_ready(url, api)
    developer, user = make_key(env, "developer"), make_key(env, "user")
    shots = {
        name: few_shot(load_task(datasets_dir, name, "test"), per_class=4, seed=1)
        for name in ("sst2", "trec")
    }

    with DockClient(url, developer) as dev, DockClient(url, user) as usr:
        first = [dev.submit(tfidf_packages[name]) for name in ("sst2", "trec")]
        # Stop Redis while they are in flight: one is being worked on.
        wait_until(database_url, "started", lambda rows: any(r.state == JobState.running for r in rows), 300)
        redis_server.stop()
        stopped = time.monotonic()
        during = [dev.submit(tfidf_packages["sms_spam"])]
        tasks = [
            usr.task(q.texts, [int(y) for y in q.labels], q.label_names, top_k=3) for q in shots.values()
        ]
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
        redis_server.start()

        rows = wait_until(
            database_url,
            "all ended",
            lambda rows: len(rows) == 5 and all(r.state.value in ("succeeded", "failed") for r in rows),
            600,
        )
        for row in rows:
            assert row.state == JobState.succeeded, (row.id, row.kind, row.error, processes.report())
            claims = [m.groups() for m in map(ATTEMPT.search, row.log) if m]
            stages = [stage for _, stage in claims]
            assert len(stages) == len(set(stages)), f"job {row.id} ran a stage twice: {row.log}"
            assert all(n == "1" for n, _ in claims), row.log
        # The outage really cost messages: some jobs were sent again after it.
        assert any(any("sent again" in line for line in row.log) for row in rows), [r.log for r in rows]
        for sub in [*first, *during]:
            assert dev.learnware(sub.learnware_id).status.value == "ready"
        for posted in tasks:
            result = usr.task_result(posted.task_id)
            # Ranked against the learnwares ready by then (maybe none yet: the outage decides).
            assert result.status.value == "ready" and len(result.matches) <= 3, result
        index = wait_ready(url, api)["checks"]["index"]  # type: ignore[index]
        assert index["size"] == 3  # three learnwares, none indexed twice
