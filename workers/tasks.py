"""Thin Celery tasks: each takes a job id, runs one pipeline stage through ``run_stage`` and lets
the jobs table record the outcome (a transient error gives the job back to be sent again)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery, Task, signals

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

log = logging.getLogger(__name__)

StageTask = Callable[[Task, int], str]

_runtime: Runtime | None = None
_runtime_pid: int | None = None
_lock = threading.Lock()


def runtime(celery_app: Celery) -> Runtime:
    """This process's runtime (rebuilt after a fork: connections are not shared across processes)."""
    global _runtime, _runtime_pid
    with _lock:
        if _runtime is None or _runtime_pid != os.getpid():
            _runtime = Runtime.create(get_settings(), persist_index=False, celery_app=celery_app)
            _runtime_pid = os.getpid()
        return _runtime


def _run(task: Task, job_id: int, stage: Stage, fn: StageFn) -> str:
    return run_stage(runtime(task.app), job_id, stage, fn, worker=str(task.request.hostname or "worker"))


def validate_learnware(self: Task, job_id: int) -> str:
    return _run(self, job_id, VALIDATE_LEARNWARE, learnware_pipeline.validate)


def fit_learnware_spec(self: Task, job_id: int) -> str:
    return _run(self, job_id, FIT_LEARNWARE_SPEC, learnware_pipeline.fit_spec)


def fit_task_spec(self: Task, job_id: int) -> str:
    return _run(self, job_id, FIT_TASK_SPEC, task_pipeline.fit_and_identify)


def identify_task(self: Task, job_id: int) -> str:
    return _run(self, job_id, IDENTIFY_TASK, task_pipeline.identify)


def rebuild_index(self: Task, job_id: int) -> str:
    return _run(self, job_id, REBUILD_INDEX, index_pipeline.rebuild)


def reuse_merge(self: Task, job_id: int) -> str:
    return _run(self, job_id, REUSE_MERGE, reuse_pipeline.merge)


def reuse_finetune(self: Task, job_id: int) -> str:
    return _run(self, job_id, REUSE_FINETUNE, reuse_pipeline.finetune)


def reuse_transfer(self: Task, job_id: int) -> str:
    return _run(self, job_id, REUSE_TRANSFER, reuse_pipeline.transfer)


# The stage each task runs, by the stage's task name.
TASKS: dict[Stage, StageTask] = {
    VALIDATE_LEARNWARE: validate_learnware,
    FIT_LEARNWARE_SPEC: fit_learnware_spec,
    FIT_TASK_SPEC: fit_task_spec,
    IDENTIFY_TASK: identify_task,
    REBUILD_INDEX: rebuild_index,
    REUSE_MERGE: reuse_merge,
    REUSE_FINETUNE: reuse_finetune,
    REUSE_TRANSFER: reuse_transfer,
}


def register(app: Celery) -> None:
    """Register every stage's task on ``app`` (the worker's Celery app)."""
    for stage, fn in TASKS.items():
        app.task(name=stage.name, bind=True)(fn)


_reaper: Reaper | None = None


@signals.worker_ready.connect
def _start_reaper(sender: Any = None, **_kwargs: object) -> None:
    """The worker's main process re-queues jobs of dead workers (itself included, after a restart)."""
    global _reaper
    _reaper = Reaper(runtime(sender.app))
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


def checks_tasks(celery_app: Celery) -> bool:
    """Whether this worker consumes the queue of the stage that runs the shot check: a few-shot
    task's spec is fitted and ranked in one stage (`FIT_TASK_SPEC`, `fit_and_identify`), while
    `IDENTIFY_TASK` ranks uploaded specs, which have no examples to check on. A worker of the
    ``cpu`` queue alone never checks a model: nothing to warm up."""
    consumed = getattr(celery_app.amqp.queues, "consume_from", None) or {}
    return not consumed or FIT_TASK_SPEC.queue in consumed


@signals.worker_process_init.connect
def _warm_shot_check(**_kwargs: object) -> None:
    """A pool process that will check models loads the ones recent tasks checked most, in the
    background (`app.tasks.shot_check.warm_up`): its first tasks need not wait for every load."""
    from celery import current_app

    from app.tasks.shot_check import warm_up

    app = current_app._get_current_object()
    if get_settings().shot_check_warm_models <= 0 or not checks_tasks(app):
        return

    def warm() -> None:
        try:
            warm_up(runtime(app))
        except Exception:  # a warm-up is an optimisation: the worker runs without one
            log.exception("shot check warm-up failed")

    threading.Thread(target=warm, name="shot-check-warm-up", daemon=True).start()
