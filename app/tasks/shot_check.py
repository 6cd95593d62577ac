"""The shot check: the top matches of a task's label set run on the user's own examples.

A task spec says which learnwares do the user's kind of task, not which of several close ones is
best at it. While a job holds the user's examples (before it erases them), it runs the first
`shot_check_k` matches whose label set is the task's on those examples and ranks them by their
accuracy (ties keep the spec's order); every match the check ran carries its `shot_accuracy`.
The identification benchmark measures what this adds (docs/benchmarks/identification.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.jobs.runner import JobContext
from app.learnwares import repository as learnwares
from app.learnwares.pipeline import extracted
from app.ml.errors import InvalidInput, InvalidPackage
from app.ml.identify import Match, shot_checked


def label_index(model_names: Sequence[str], task_names: Sequence[str]) -> np.ndarray:
    """Task label id of each of the model's label ids, matching names case-insensitively."""
    position = {name.strip().casefold(): i for i, name in enumerate(task_names)}
    try:
        return np.asarray([position[name.strip().casefold()] for name in model_names], dtype=np.int64)
    except KeyError as missing:
        raise InvalidInput(f"label {missing} is not among the task's labels {list(task_names)}") from None


def shot_accuracies(
    ctx: JobContext,
    results: Sequence[dict[str, Any]],
    texts: Sequence[str],
    labels: np.ndarray,
    label_names: Sequence[str],
    k: int,
) -> dict[int, float | None]:
    """Accuracy on the examples of each of the first `k` results whose labels match the task's.

    A learnware that cannot be run (its package is gone or no longer loads) gets None and a line
    in the job's log: the check never fails the identification.
    """
    from app.ml.runners import load_runner  # torch-heavy: only in workers

    candidates = [r["learnware_id"] for r in results[:k] if r.get("labels_match")]
    with ctx.runtime.db.session() as session:
        rows = learnwares.ready_by_ids(session, candidates)
        packages = {i: rows[i].package_sha256 for i in candidates if i in rows}
    accuracy: dict[int, float | None] = {}
    for done, learnware_id in enumerate(candidates, start=1):
        try:
            if learnware_id not in packages:
                raise InvalidPackage(f"learnware {learnware_id} is no longer ready")
            with extracted(ctx, packages[learnware_id]) as package:
                runner = load_runner(package)
                predicted = runner.predict(list(texts)).labels
                mapping = label_index(runner.label_names, label_names)
            accuracy[learnware_id] = float(np.mean(mapping[predicted] == labels))
        except (InvalidPackage, InvalidInput, OSError, RuntimeError, ValueError) as error:
            accuracy[learnware_id] = None
            ctx.log(f"shot check skipped learnware {learnware_id}: {error}")
        ctx.progress(0.86 + 0.1 * done / len(candidates), f"shot check {done}/{len(candidates)}", force=True)
    return accuracy


def with_shot_check(
    results: Sequence[dict[str, Any]], accuracy: dict[int, float | None], k: int
) -> list[dict[str, Any]]:
    """`results` with the first `k` re-ranked by `accuracy`, ranks renumbered, `shot_accuracy` set."""
    by_id = {r["learnware_id"]: r for r in results}
    order = shot_checked([Match(r["learnware_id"], r["score"]) for r in results], accuracy, k)
    return [
        {**by_id[match.id], "rank": rank, "shot_accuracy": accuracy.get(match.id)}
        for rank, match in enumerate(order, start=1)
    ]
