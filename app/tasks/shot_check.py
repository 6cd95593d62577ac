"""The shot check: the top matches of a task's label set run on the user's own examples.

A task spec says which learnwares do the user's kind of task, not which of several close ones is
best at it. While a job holds the user's examples (before it erases them), it runs those of the
first `shot_check_k` matches whose label set is the task's on those examples (or, when none is,
those with as many classes, through the label map that fits the examples best) and ranks them by
their accuracy, equal accuracies by the mean probability they gave the true labels (ties keep
the spec's order); every match the check ran carries its `shot_accuracy` and `shot_confidence`
(and `label_map` when its names are not the task's).
The identification benchmark measures what this adds (docs/benchmarks/identification.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from app.errors import InvalidInput, InvalidPackage
from app.jobs.runner import JobContext
from app.learnwares import repository as learnwares
from app.learnwares.packages import extracted
from app.ml.identify import Match, ShotScore, best_label_map, shot_candidates, shot_checked, shot_score

if TYPE_CHECKING:
    from app.ml.runners.base import Predictions  # torch-heavy: only in workers


def label_index(model_names: Sequence[str], task_names: Sequence[str]) -> np.ndarray:
    """Task label id of each of the model's label ids, matching names case-insensitively."""
    position = {name.strip().casefold(): i for i, name in enumerate(task_names)}
    try:
        return np.asarray([position[name.strip().casefold()] for name in model_names], dtype=np.int64)
    except KeyError as missing:
        raise InvalidInput(f"label {missing} is not among the task's labels {list(task_names)}") from None


@dataclass(frozen=True)
class ShotResult:
    """One checked match: its score on the examples and, when its label names are not the
    task's, the map of its labels onto the task's under which it reached that score."""

    score: ShotScore
    label_map: dict[str, str] | None = None


def shot_results(
    ctx: JobContext,
    results: Sequence[dict[str, Any]],
    texts: Sequence[str],
    labels: np.ndarray,
    label_names: Sequence[str],
    k: int,
) -> dict[int, ShotResult | None]:
    """Run the matches `shot_candidates` picks among the first `k` on the examples.

    A learnware that cannot be run (its package is gone or no longer loads) gets None and a line
    in the job's log: the check never fails the identification.
    """
    from app.ml.runners import load_runner  # torch-heavy: only in workers

    matches = [Match(r["learnware_id"], r["score"]) for r in results]
    names = {r["learnware_id"]: list(r["label_names"]) for r in results}
    candidates, mapped = shot_candidates(matches, names, label_names, k)
    with ctx.runtime.db.session() as session:
        rows = learnwares.ready_by_ids(session, candidates)
        packages = {i: rows[i].package_sha256 for i in candidates if i in rows}
    checked: dict[int, ShotResult | None] = {}
    for done, learnware_id in enumerate(candidates, start=1):
        try:
            if learnware_id not in packages:
                raise InvalidPackage(f"learnware {learnware_id} is no longer ready")
            with extracted(ctx.runtime, packages[learnware_id], label=f"job-{ctx.claim.job_id}") as package:
                runner = load_runner(package)
                predicted = runner.predict(list(texts))
            checked[learnware_id] = _score(list(runner.label_names), predicted, labels, label_names, mapped)
        except (InvalidPackage, InvalidInput, OSError, RuntimeError, ValueError) as error:
            checked[learnware_id] = None
            ctx.log(f"shot check skipped learnware {learnware_id}: {error}")
        ctx.progress(0.86 + 0.1 * done / len(candidates), f"shot check {done}/{len(candidates)}", force=True)
    return checked


def _score(
    model_names: list[str],
    predicted: Predictions,
    labels: np.ndarray,
    task_names: Sequence[str],
    mapped: bool,
) -> ShotResult:
    if not mapped:
        mapping = label_index(model_names, task_names)
        return ShotResult(shot_score(predicted.labels, predicted.probs, labels, mapping))
    mapping, _ = best_label_map(predicted.labels, labels, len(task_names))
    return ShotResult(
        shot_score(predicted.labels, predicted.probs, labels, mapping),
        {name: task_names[int(mapping[i])] for i, name in enumerate(model_names)},
    )


def with_shot_check(
    results: Sequence[dict[str, Any]], checked: dict[int, ShotResult | None], k: int
) -> list[dict[str, Any]]:
    """`results` with the checked ones among the first `k` ranked by their shot score (ties keep
    their order), ranks renumbered, `shot_accuracy`, `shot_confidence` and `label_map` set where
    the check ran."""
    by_id = {r["learnware_id"]: r for r in results}
    scores = {i: (c.score if c is not None else None) for i, c in checked.items()}
    order = shot_checked([Match(r["learnware_id"], r["score"]) for r in results], scores, k)
    out = []
    for rank, match in enumerate(order, start=1):
        result = checked.get(match.id)
        out.append(
            {
                **by_id[match.id],
                "rank": rank,
                "shot_accuracy": None if result is None else result.score.accuracy,
                "shot_confidence": None if result is None else result.score.confidence,
                "label_map": None if result is None else result.label_map,
            }
        )
    return out
