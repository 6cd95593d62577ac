"""Thin Celery tasks: each takes a job id, runs one pipeline stage through ``run_stage`` and lets
the jobs table record the outcome (a transient error gives the job back to be sent again)."""

from __future__ import annotations

import logging
import os
import threading

from celery import Task, signals

from app.index import pipeline as index_pipeline
from app.jobs.reaper import Reaper
from app.jobs.runner import StageFn, run_stage
from app.jobs.stages import (
    FIT_LEARNWARE_SPEC,
    FIT_TASK_SPEC,
    IDENTIFY_TASK,
    REBUILD_INDEX,
    REUSE_FINETUNE,
    REUSE_MERGE,
    REUSE_TRANSFER,
    VALIDATE_LEARNWARE,
    Stage,
)
from app.learnwares import pipeline as learnware_pipeline
from app.reuse import pipeline as reuse_pipeline
from app.runtime import Runtime
from app.settings import get_settings
from app.tasks import pipeline as task_pipeline
from workers.celery_app import app

log = logging.getLogger(__name__)

_runtime: Runtime | None = None
_runtime_pid: int | None = None
_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime (rebuilt after a fork: connections are not shared across processes)."""
    global _runtime, _runtime_pid
    with _lock:
        if _runtime is None or _runtime_pid != os.getpid():
            _runtime = Runtime.create(get_settings(), persist_index=False, celery_app=app)
            _runtime_pid = os.getpid()
        return _runtime


def _run(task: Task, job_id: int, stage: Stage, fn: StageFn) -> str:
    return run_stage(runtime(), job_id, stage, fn, worker=str(task.request.hostname or "worker"))


@app.task(name=VALIDATE_LEARNWARE.name, bind=True)
def validate_learnware(self: Task, job_id: int) -> str:
    return _run(self, job_id, VALIDATE_LEARNWARE, learnware_pipeline.validate)


@app.task(name=FIT_LEARNWARE_SPEC.name, bind=True)
def fit_learnware_spec(self: Task, job_id: int) -> str:
    return _run(self, job_id, FIT_LEARNWARE_SPEC, learnware_pipeline.fit_spec)


@app.task(name=FIT_TASK_SPEC.name, bind=True)
def fit_task_spec(self: Task, job_id: int) -> str:
    return _run(self, job_id, FIT_TASK_SPEC, task_pipeline.fit_and_identify)


@app.task(name=IDENTIFY_TASK.name, bind=True)
def identify_task(self: Task, job_id: int) -> str:
    return _run(self, job_id, IDENTIFY_TASK, task_pipeline.identify)


@app.task(name=REBUILD_INDEX.name, bind=True)
def rebuild_index(self: Task, job_id: int) -> str:
    return _run(self, job_id, REBUILD_INDEX, index_pipeline.rebuild)


@app.task(name=REUSE_MERGE.name, bind=True)
def reuse_merge(self: Task, job_id: int) -> str:
    return _run(self, job_id, REUSE_MERGE, reuse_pipeline.merge)


@app.task(name=REUSE_FINETUNE.name, bind=True)
def reuse_finetune(self: Task, job_id: int) -> str:
    return _run(self, job_id, REUSE_FINETUNE, reuse_pipeline.finetune)


@app.task(name=REUSE_TRANSFER.name, bind=True)
def reuse_transfer(self: Task, job_id: int) -> str:
    return _run(self, job_id, REUSE_TRANSFER, reuse_pipeline.transfer)


_reaper: Reaper | None = None


@signals.worker_ready.connect
def _start_reaper(**_kwargs: object) -> None:
    """The worker's main process re-queues jobs of dead workers (itself included, after a restart)."""
    global _reaper
    _reaper = Reaper(runtime())
    _reaper.start()


@signals.worker_shutdown.connect
def _stop_reaper(**_kwargs: object) -> None:
    if _reaper is not None:
        _reaper.stop()


@signals.worker_process_init.connect
def _fresh_runtime(**_kwargs: object) -> None:
    """A forked pool process must not reuse its parent's database connections."""
    global _runtime
    if _runtime is not None:
        _runtime.db.engine.dispose(close=False)
    _runtime = None
