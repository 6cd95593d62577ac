"""Fault injection on reuse jobs, on the production shape of ``test_faults.py`` (uvicorn, a CPU
and a GPU-queue Celery worker, a redis-server of the test's own, PostgreSQL or SQLite). The GPU
worker is SIGKILLed in the middle of a merge, a fine-tune and a transfer (UTD onto a small MPNet
built in the test, as in ``test_transfer_utd.py``): each killed job is re-run by a new worker and
registers its learnware once (a re-run never leaves a second one), only the killed stages ran
twice, and the public results are indexed once. The figures are printed at the end
(docs/benchmarks/reliability.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.client import DockClient
from app.db.models import JobState, Learnware
from app.db.session import Database
from app.ml.data import few_shot, load_task
from app.ml.mpnet import MPNET_ALIAS, model_dir
from app.reuse.schemas import FinetuneCreate, MergeCreate, Shots, TransferCreate
from tests.e2e.conftest import TEST_ENV, Processes, free_port, uvicorn_proc, wait_ready, worker_proc
from tests.e2e.test_faults import all_ended_once, kill_during
from tests.e2e.test_production_stack import make_key
from tests.e2e.test_redis_outage import database_url
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.tiny_bases import make_small_mpnet

__all__ = ["database_url"]  # the fixture
pytestmark = pytest.mark.e2e


def learnware_rows(database_url: str) -> int:
    db = Database(database_url)
    try:
        with db.session() as session:
            return int(session.scalar(select(func.count()).select_from(Learnware)) or 0)
    finally:
        db.dispose()


def test_killed_merge_finetune_and_transfer_jobs_each_register_one_learnware(
    database_url: str,
    redis_server: RedisServer,
    processes: Processes,
    lora_packages: dict[str, Path],
    datasets_dir: Path,
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    make_small_mpnet(model_dir(data_dir))  # the transfer's target base, where `bases install` puts it
    env = {
        **os.environ,
        **TEST_ENV,
        "PAVEDOCK_ENVIRONMENT": "testing",
        "PAVEDOCK_DATABASE_URL": database_url,
        "PAVEDOCK_BROKER_URL": redis_server.url,
        "PAVEDOCK_DATA_DIR": str(data_dir),
        "PAVEDOCK_JOB_REPUBLISH_AFTER_S": "2",
        "PAVEDOCK_SHOT_CHECK_K": "0",
    }
    logs = tmp_path / "logs"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = processes.start(uvicorn_proc("api", env, port, logs / "api.log"))
    processes.start(worker_proc("cpu", env, "cpu", logs / "worker-cpu.log"))
    gpu = processes.start(worker_proc("gpu", env, "gpu", logs / "worker-gpu.log"))
    wait_ready(url, api)
    developer, user = make_key(env, "developer"), make_key(env, "user")
    shots = few_shot(load_task(datasets_dir, "sst2", "train"), per_class=8, seed=0)
    labelled = Shots(texts=shots.texts, labels=[int(y) for y in shots.labels], label_names=shots.label_names)
    killed: dict[int, str] = {}

    with DockClient(url, developer) as dev, DockClient(url, user) as usr:
        ids: dict[str, int] = {}
        for name, package in lora_packages.items():
            sub = dev.submit(package)
            assert dev.wait(sub.job_id, timeout=600).state == JobState.succeeded, processes.report()
            ids[name] = sub.learnware_id
        before = learnware_rows(database_url)

        # Each reuse stage runs on the GPU queue: its worker dies mid-job, a new one takes over.
        reuse = [
            usr.merge(
                MergeCreate(learnware_ids=[ids["sst2"], ids["sms_spam"]], method="iso_c", eval=labelled)
            ),
            usr.finetune(FinetuneCreate(**labelled.model_dump(), learnware_id=ids["sst2"], steps=10)),
            dev.transfer(
                TransferCreate(
                    learnware_id=ids["sst2"], target_base=MPNET_ALIAS, method="utd", texts=shots.texts
                )
            ),
        ]
        for n, (submitted, stage) in enumerate(
            zip(reuse, ("reuse.merge", "reuse.finetune", "reuse.transfer"), strict=True)
        ):
            kill_during(database_url, submitted.job_id, stage, gpu)
            killed[submitted.job_id] = stage
            gpu = processes.start(worker_proc("gpu", env, "gpu", logs / f"worker-gpu-{n + 2}.log"))

        # Every reuse job and the ingest job each one queued for its learnware.
        expected = len(lora_packages) + 2 * len(reuse)
        rows, reruns = all_ended_once(database_url, expected, killed, processes)
        results = {sub.job_id: row.result or {} for sub in reuse for row in rows if row.id == sub.job_id}
        registered = {int(result["learnware_id"]) for result in results.values()}
        assert len(registered) == len(reuse)
        assert learnware_rows(database_url) == before + len(reuse)  # no re-run left a second one
        merged, tuned, moved = (results[sub.job_id] for sub in reuse)
        assert usr.learnware(int(merged["learnware_id"])).status.value == "ready"
        assert usr.learnware(int(tuned["learnware_id"])).status.value == "ready"
        assert moved["format"] == "pooled-linear"
        assert dev.learnware(int(moved["learnware_id"])).status.value == "ready"
        index = wait_ready(url, api)["checks"]["index"]  # type: ignore[index]
        # The two LoRA learnwares and the public transfer; the user's merge and fine-tune are private.
        assert index["size"] == len(lora_packages) + 1
    figures = {
        "jobs": len(rows),
        "succeeded": sum(r.state == JobState.succeeded for r in rows),
        "lost": expected - len(rows) + sum(r.state != JobState.succeeded for r in rows),
        "killed_stages_rerun": reruns,
        "learnwares_registered_by_reuse": learnware_rows(database_url) - before,
        "indexed": index["size"],
        "database": "postgresql" if os.environ.get("PAVEDOCK_TEST_POSTGRES_URL") else "sqlite",
    }
    print(f"\nreuse fault summary: {json.dumps(figures)}")
