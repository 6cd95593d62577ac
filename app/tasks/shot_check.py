"""The shot check: a few of the top candidates run on the user's own examples.

A task spec says which learnwares do the user's kind of task, not which of several close ones is
best at it, nor whether a learnware that copied a good one's spec is any good. While a job holds
the user's examples (before it erases them), it runs up to `shot_check_k` candidates that can
answer the task on them (`choose_checked`: near-identical specs take one place, so a flood of
copies cannot fill the check), each under the label map a person would accept (by name, by the
names' meaning, or by the examples where the names do not decide: `choose_label_map`), and
`rank_for_task` orders them by how they did. The identification benchmark measures what this
adds (docs/benchmarks/identification.md).

A worker keeps the models it ran last loaded (`LoadedRunners`, `shot_check_loaded_models` of
them, keyed by the package's digest, so a package is never stale): a popular learnware is then
not fetched, extracted and loaded again for each task that checks it
(docs/benchmarks/task-latency.md measures the difference).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from app.errors import InvalidInput, InvalidPackage
from app.jobs.runner import JobContext
from app.learnwares import repository as learnwares
from app.learnwares.packages import extracted
from app.ml.ranking import (
    Candidate,
    LabelMap,
    ShotScore,
    choose_checked,
)
from app.ml.shot_check import check_runner

if TYPE_CHECKING:
    from app.ml.runners.base import Runner
    from app.ml.spec_space import SpecSpace  # torch-heavy: only in workers


class LoadedRunners:
    """The last few loaded models of this process, by package digest (least recently used out).

    A model that fails to load is not kept: the next task tries it again and logs why."""

    def __init__(self) -> None:
        self._runners: OrderedDict[str, Runner] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sha256: str, load: Callable[[], Runner], capacity: int) -> tuple[Runner, bool]:
        """The runner of package ``sha256`` and whether it was loaded already; ``load`` makes it
        otherwise, and it is kept when ``capacity`` > 0."""
        with self._lock:
            runner = self._runners.get(sha256)
            if runner is not None:
                self._runners.move_to_end(sha256)
                return runner, True
        runner = load()  # outside the lock: loading takes a while, another thread may check meanwhile
        with self._lock:
            if capacity > 0:
                self._runners[sha256] = runner
                self._runners.move_to_end(sha256)
            while len(self._runners) > capacity:
                self._runners.popitem(last=False)
        return runner, False

    def __len__(self) -> int:
        return len(self._runners)

    def __contains__(self, sha256: object) -> bool:
        return sha256 in self._runners


LOADED = LoadedRunners()


def shot_check(
    ctx: JobContext,
    space: SpecSpace,
    candidates: Sequence[Candidate],
    texts: Sequence[str],
    labels: np.ndarray,
    label_names: Sequence[str],
    k: int,
) -> tuple[dict[int, LabelMap | None], dict[int, ShotScore | None]]:
    """Run the candidates `choose_checked` picks on the examples: their label maps and scores.

    A learnware that cannot be run (its package is gone or no longer loads) is left unchecked,
    with a line in the job's log: the check never fails the identification.
    """
    pool = list(candidates[: 4 * k])
    with ctx.runtime.db.session() as session:
        vectors = learnwares.spec_vectors(session, [c.id for c in pool])
        chosen = choose_checked(pool, label_names, vectors, k)
        rows = learnwares.ready_by_ids(session, chosen)
        packages = {i: rows[i].package_sha256 for i in chosen if i in rows}
    maps: dict[int, LabelMap | None] = {}
    scores: dict[int, ShotScore | None] = {}
    capacity = ctx.runtime.settings.shot_check_loaded_models
    started, reused = time.perf_counter(), 0
    for done, learnware_id in enumerate(chosen, start=1):
        try:
            if learnware_id not in packages:
                raise InvalidPackage(f"learnware {learnware_id} is no longer ready")
            sha256 = packages[learnware_id]
            runner, was_loaded = LOADED.get(sha256, partial(_load, ctx, sha256), capacity)
            reused += was_loaded
            maps[learnware_id], scores[learnware_id] = check_runner(runner, texts, labels, label_names, space)
        except (InvalidPackage, InvalidInput, OSError, RuntimeError, ValueError) as error:
            ctx.log(f"shot check skipped learnware {learnware_id}: {error}")
        ctx.progress(0.86 + 0.1 * done / len(chosen), f"shot check {done}/{len(chosen)}", force=True)
    ctx.log(
        f"shot check: {len(scores)} of {len(chosen)} matches run on the examples in "
        f"{time.perf_counter() - started:.2f} s ({reused} of them already loaded)"
    )
    return maps, scores


def _load(ctx: JobContext, sha256: str) -> Runner:
    """The stored package fetched, extracted (checked again) and its model loaded from its weights
    alone (`load_runner`: safetensors or ONNX, no code runs); the scratch folder is removed after."""
    from app.ml.runners import load_runner  # torch-heavy

    with extracted(ctx.runtime, sha256, label=f"job-{ctx.claim.job_id}") as package:
        return load_runner(package)
