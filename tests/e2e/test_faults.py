"""Fault injection on the production shape: uvicorn, a CPU and a GPU-queue Celery worker, a
redis-server of the test's own and PostgreSQL (SQLite when PAVEDOCK_TEST_POSTGRES_URL is not
set). A worker is SIGKILLed in the middle of each kind of stage (validating a learnware, fitting
its spec, fitting a task's spec), the API is restarted while a learnware is being fitted and
indexed, and Redis is stopped while jobs are in flight: no job is lost (every one ends, and
succeeds), only the killed stages ran twice, and no learnware is indexed twice. The figures are
printed at the end (docs/benchmarks/reliability.md); tests/e2e/test_redis_outage.py is the
longer Redis outage."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.client import DockClient
from app.db.models import Job, JobState
from app.ml.data import few_shot, load_task
from tests.e2e.conftest import TEST_ENV, Proc, Processes, free_port, uvicorn_proc, wait_ready, worker_proc
from tests.e2e.test_production_stack import make_key
from tests.e2e.test_redis_outage import ATTEMPT, database_url, jobs, wait_until
from tests.fixtures.redis_server import RedisServer

__all__ = ["database_url"]  # the fixture, shared with the outage test
pytestmark = pytest.mark.e2e


def kill_during(database_url: str, job_id: int, stage: str, worker: Proc, timeout: float = 300) -> Job:
    """SIGKILL ``worker`` (with its pool) once job ``job_id`` runs ``stage`` on it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = next(j for j in jobs(database_url) if j.id == job_id)
        if job.state == JobState.running and job.stage == stage:
            worker.kill()
            return job
        assert job.state in (JobState.queued, JobState.running), f"job {job_id} ended first: {job.state}"
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} did not start {stage} in {timeout:.0f} s")


def all_ended_once(
    database_url: str, expected: int, killed: dict[int, str], processes: Processes
) -> tuple[list[Job], int]:
    """Wait for ``expected`` jobs to end; assert each succeeded and ran a stage twice only if it
    was killed during it (the log's ``attempt n/m of <stage>`` lines). Returns the rows and how
    many killed stages were re-run."""
    rows = wait_until(
        database_url,
        "all ended",
        lambda rows: len(rows) == expected and all(r.state.value in ("succeeded", "failed") for r in rows),
        900,
    )
    reruns = 0
    for row in rows:
        assert row.state == JobState.succeeded, (row.id, row.kind, row.error, processes.report())
        claims = [stage for _, stage in (m.groups() for m in map(ATTEMPT.search, row.log) if m)]
        twice = {stage for stage in claims if claims.count(stage) > 1}
        if row.id in killed:
            assert twice == {killed[row.id]}, (row.id, row.log)
            assert any(f"lost during {killed[row.id]}" in line for line in row.log), row.log
            reruns += 1
        else:
            assert not twice, (row.id, row.log)  # none ran a stage twice
    return rows, reruns


def test_killed_workers_a_restarted_api_and_a_redis_stop_lose_no_job(
    database_url: str,
    redis_server: RedisServer,
    processes: Processes,
    tfidf_packages: dict[str, Path],
    linear_packages: dict[str, Path],
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
    workers = {
        queue: processes.start(worker_proc(queue, env, queue, logs / f"worker-{queue}.log"))
        for queue in ("cpu", "gpu")
    }
    wait_ready(url, api)
    developer, user = make_key(env, "developer"), make_key(env, "user")
    killed: dict[int, str] = {}

    def restart(queue: str, n: int) -> None:
        workers[queue] = processes.start(worker_proc(queue, env, queue, logs / f"worker-{queue}-{n}.log"))

    with DockClient(url, developer) as dev, DockClient(url, user) as usr:
        # 1. The CPU worker dies while validating (running a MiniLM classifier on its inputs).
        validating = dev.submit(linear_packages["sst2"])
        kill_during(database_url, validating.job_id, "learnware.validate", workers["cpu"])
        killed[validating.job_id] = "learnware.validate"
        restart("cpu", 2)

        # 2. The GPU worker dies while fitting a learnware's spec.
        fitting = dev.submit(tfidf_packages["trec"])
        kill_during(database_url, fitting.job_id, "learnware.spec", workers["gpu"])
        killed[fitting.job_id] = "learnware.spec"
        restart("gpu", 2)

        # 3. The GPU worker dies while fitting a task's spec (300 shots: seconds of work).
        shots = few_shot(load_task(datasets_dir, "sst2", "train"), per_class=150, max_total=300, seed=2)
        task = usr.task(shots.texts, [int(y) for y in shots.labels], shots.label_names, top_k=3)
        kill_during(database_url, task.job_id, "task.fit", workers["gpu"])
        killed[task.job_id] = "task.fit"
        restart("gpu", 3)

        # 4. The API restarts while a learnware is fitted and indexed.
        indexing = dev.submit(tfidf_packages["sms_spam"])
        wait_until(
            database_url,
            "fitting",
            lambda rows: any(r.id == indexing.job_id and r.stage == "learnware.spec" for r in rows),
            300,
        )
        api.stop()
        api = processes.start(uvicorn_proc("api", env, port, logs / "api-2.log"))
        wait_ready(url, api)

        # 5. Redis stops for 5 s while a learnware and a task are submitted.
        redis_server.stop()
        during = dev.submit(tfidf_packages["sst2"])
        small = few_shot(load_task(datasets_dir, "trec", "test"), per_class=4, seed=1)
        late_task = usr.task(small.texts, [int(y) for y in small.labels], small.label_names, top_k=3)
        time.sleep(5)
        redis_server.start()

        submitted = [validating, fitting, indexing, during]
        expected = len(submitted) + 2  # and the two tasks
        rows, reruns = all_ended_once(database_url, expected, killed, processes)
        for sub in submitted:
            assert dev.learnware(sub.learnware_id).status.value == "ready"
        for posted in (task, late_task):
            assert usr.task_result(posted.task_id).status.value == "ready"
        index = wait_ready(url, api)["checks"]["index"]  # type: ignore[index]
        assert index["size"] == len(submitted)  # each learnware indexed once
    figures = {
        "jobs": len(rows),
        "succeeded": sum(r.state == JobState.succeeded for r in rows),
        "lost": expected - len(rows) + sum(r.state != JobState.succeeded for r in rows),
        "killed_stages_rerun": reruns,
        "indexed": index["size"],
        "learnwares": len(submitted),
        "database": "postgresql" if os.environ.get("PAVEDOCK_TEST_POSTGRES_URL") else "sqlite",
    }
    print(f"\nfault summary: {json.dumps(figures)}")
