"""The steps a job passes through, the Celery task that runs each and the queue it goes to.

A job's ``stage`` names its next step; the reaper re-sends that step's task when a worker died.
Spec fitting runs on the ``gpu`` queue, everything else on ``cpu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Queue = Literal["gpu", "cpu"]
QUEUES: tuple[Queue, ...] = ("gpu", "cpu")


@dataclass(frozen=True)
class Stage:
    name: str
    """Also the Celery task name."""
    queue: Queue
    description: str


VALIDATE_LEARNWARE = Stage("learnware.validate", "cpu", "check the package and run the model on its inputs")
FIT_LEARNWARE_SPEC = Stage("learnware.spec", "gpu", "fit or verify the learnware's spec, then index it")
FIT_TASK_SPEC = Stage("task.fit", "gpu", "fit the user task's spec, then identify")
IDENTIFY_TASK = Stage("task.identify", "cpu", "rank learnwares against the task's spec")
REBUILD_INDEX = Stage("index.rebuild", "cpu", "rebuild a spec space's index from the database")
REUSE_MERGE = Stage("reuse.merge", "gpu", "merge learnwares into a new learnware")
REUSE_FINETUNE = Stage("reuse.finetune", "gpu", "fine-tune a learnware on the user's shots")
REUSE_TRANSFER = Stage("reuse.transfer", "gpu", "transfer a learnware onto another base")

STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        VALIDATE_LEARNWARE,
        FIT_LEARNWARE_SPEC,
        FIT_TASK_SPEC,
        IDENTIFY_TASK,
        REBUILD_INDEX,
        REUSE_MERGE,
        REUSE_FINETUNE,
        REUSE_TRANSFER,
    )
}


def stage(name: str) -> Stage:
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"unknown job stage {name!r}; known: {', '.join(sorted(STAGES))}") from None
