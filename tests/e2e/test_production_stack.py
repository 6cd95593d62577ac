"""End to end on the production stack: uvicorn, a CPU and a GPU-queue Celery worker, real Redis
and real PostgreSQL. Three real learnwares on the MiniLM base are submitted, a few-shot task
from one of them ranks it first, it is downloaded; a worker is killed mid-job; the API restarts.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.client import DockClient
from app.db.migrate import upgrade
from app.db.models import Job, JobState
from app.db.session import Database
from app.ml.data import few_shot, load_task
from tests.e2e.conftest import TEST_ENV, Processes, free_port, uvicorn_proc, wait_ready, worker_proc

pytestmark = pytest.mark.e2e

POSTGRES_URL = os.environ.get("PAVEDOCK_TEST_POSTGRES_URL")
REDIS_URL = os.environ.get("PAVEDOCK_TEST_REDIS_URL")


@pytest.fixture
def stack_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    if not (POSTGRES_URL and REDIS_URL):
        pytest.skip("set PAVEDOCK_TEST_POSTGRES_URL and PAVEDOCK_TEST_REDIS_URL (.ci/run does)")
    name = f"pavedock_e2e_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    database_url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    redis.Redis.from_url(REDIS_URL).flushdb()
    upgrade(database_url)
    env = {
        **os.environ,
        **TEST_ENV,
        "PAVEDOCK_ENVIRONMENT": "testing",
        "PAVEDOCK_DATABASE_URL": database_url,
        "PAVEDOCK_BROKER_URL": REDIS_URL,
        "PAVEDOCK_DATA_DIR": str(tmp_path / "data"),
    }
    try:
        yield env
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def make_key(env: dict[str, str], role: str) -> str:
    from app.auth.service import create_key
    from app.db.models import Role

    db = Database(env["PAVEDOCK_DATABASE_URL"])
    try:
        with db.session() as session:
            return create_key(session, role=Role(role), name=f"e2e {role}").token
    finally:
        db.dispose()


def running_job(env: dict[str, str], job_id: int, timeout: float = 300.0) -> Job:
    """Poll the database until the job is running and has reported progress."""
    db = Database(env["PAVEDOCK_DATABASE_URL"])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with db.session() as session:
                job = session.get(Job, job_id)
                assert job is not None
                if job.state == JobState.running and job.stage == "learnware.spec" and job.progress > 0.45:
                    session.expunge(job)
                    return job
                assert job.state in (JobState.queued, JobState.running), (
                    f"job ended before the kill: {job.state}"
                )
            time.sleep(0.1)
    finally:
        db.dispose()
    raise AssertionError(f"job {job_id} did not start fitting in {timeout:.0f} s")


def test_submit_identify_download_survive_a_dead_worker_and_an_api_restart(
    stack_env: dict[str, str],
    processes: Processes,
    minilm_packages: dict[str, Path],
    tfidf_packages: dict[str, Path],
    datasets_dir: Path,
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = processes.start(uvicorn_proc("api", stack_env, port, logs / "api.log"))
    cpu = processes.start(worker_proc("cpu", stack_env, "cpu", logs / "worker-cpu.log"))
    gpu = processes.start(worker_proc("gpu", stack_env, "gpu", logs / "worker-gpu.log"))
    wait_ready(url, api)
    developer, user = make_key(stack_env, "developer"), make_key(stack_env, "user")

    # Three real learnwares on the MiniLM base, for three datasets.
    with DockClient(url, developer) as dev:
        submitted = {name: dev.submit(path) for name, path in minilm_packages.items()}
        for name, sub in submitted.items():
            job = dev.wait(sub.job_id, timeout=600)
            assert job.state.value == "succeeded", f"{name}: {job.error}\n{processes.report()}"
            assert job.attempts == 1
            learnware = dev.learnware(sub.learnware_id)
            assert learnware.status.value == "ready" and learnware.spec_recomputed is True
            assert any("fitted the spec" in line for line in learnware.validation_log)
        stages = [line for line in dev.job(submitted["trec"].job_id).log if "attempt 1/3" in line]
        assert any("learnware.validate on cpu@" in line for line in stages)
        assert any("learnware.spec on gpu@" in line for line in stages)

    # A user's few-shot task from the ag_news test split ranks the ag_news learnware first.
    query = few_shot(load_task(datasets_dir, "ag_news", "test"), per_class=8, seed=1)
    labels = [int(y) for y in query.labels]
    with DockClient(url, user) as client:
        posted = client.task(query.texts, labels, query.label_names, top_k=3)
        result = client.wait_task(posted.task_id, timeout=300)
        assert result.status.value == "ready", result.error
        ranked = [m.learnware_id for m in result.matches]
        assert ranked[0] == submitted["ag_news"].learnware_id, result.matches
        # The shot check ran it on the examples by name. Of the other two, trec's (six classes under
        # other names) may answer through a label map: by its names' meaning, or picked by the
        # examples and priced by what the names say of that map (four of six question types for
        # news topics, one map of 360), so it stays behind the news learnware; sst2's (two
        # classes) cannot answer four labels and was not run.
        top = result.matches[0]
        assert top.shot_accuracy is not None and top.shot_accuracy > 0.5 and top.label_map_how == "names"
        others = {m.learnware_id: m for m in result.matches[1:]}
        sst2 = others[submitted["sst2"].learnware_id]
        assert sst2.tier == "cannot-answer" and sst2.shot_accuracy is None
        trec = others[submitted["trec"].learnware_id]
        assert trec.tier == "label-map" and trec.label_map_how in ("meaning", "examples", None)
        assert trec.checked == (trec.label_map_how is not None)
        if trec.label_map_how == "examples":
            assert trec.shot_map_cost is not None and trec.shot_map_cost > 0
        assert len(ranked) == 3 and result.examples_kept is False
        # The same task computed here and uploaded as a spec only: the same winner.
        local = client.task(query.texts, labels, query.label_names, top_k=3, local_spec=True)
        local_result = client.wait_task(local.task_id, timeout=300)
        assert local_result.n_examples == 0
        assert local_result.matches[0].learnware_id == ranked[0]
        spec = client.compute_task_spec(query.texts, labels, query.label_names, tmp_path / "ag_news-task")
        before_restart = client.identify(spec, k=4)
        assert before_restart.matches[0].learnware_id == ranked[0]
        downloaded = client.download(ranked[0], tmp_path)
        assert downloaded.read_bytes() == minilm_packages["ag_news"].read_bytes()

    # Kill the GPU worker in the middle of fitting a spec: the job is re-run by a new worker.
    with DockClient(url, developer) as dev:
        victim = dev.submit(tfidf_packages["sms_spam"])
        job = running_job(stack_env, victim.job_id)
        assert job.worker is not None and job.worker.startswith("gpu@")
        gpu.kill()
        gpu = processes.start(worker_proc("gpu", stack_env, "gpu", logs / "worker-gpu-2.log"))
        final = dev.wait(victim.job_id, timeout=600)
        assert final.state.value in ("succeeded", "failed")
        if final.state.value == "succeeded":
            assert final.attempts == 2
            assert any("lost during learnware.spec" in line for line in final.log)
            assert dev.learnware(victim.learnware_id).status.value == "ready"
        else:
            assert final.error and "lost" in final.error
    ready_before = wait_ready(url, api)
    index_before = ready_before["checks"]["index"]  # type: ignore[index]
    assert index_before["size"] == 4  # four ready learnwares, none indexed twice

    # Restart the API: the index comes back (from its file) with the same ranking.
    api.stop()
    api = processes.start(uvicorn_proc("api", stack_env, port, logs / "api-2.log"))
    index_after = wait_ready(url, api)["checks"]["index"]  # type: ignore[index]
    assert index_after["size"] == 4 and index_after["version"] == index_before["version"]
    assert index_after["source"] == "file"
    with DockClient(url, user) as client:
        after_restart = client.identify(spec, k=4)
        kept = [
            m
            for m in after_restart.matches
            if m.learnware_id in {x.learnware_id for x in before_restart.matches}
        ]
        assert [(m.learnware_id, m.score) for m in kept] == [
            (m.learnware_id, m.score) for m in before_restart.matches
        ]
        assert after_restart.matches[0].learnware_id == submitted["ag_news"].learnware_id
    assert cpu.alive and gpu.alive and api.alive
