"""The shot check: a few of the top candidates run on the user's own examples.

A task spec says which learnwares do the user's kind of task, not which of several close ones is
best at it, nor whether a learnware that copied a good one's spec is any good. While a job holds
the user's examples (before it erases them), it runs up to `shot_check_k` candidates that can
answer the task on them (`choose_checked`: near-identical specs take one place, so a flood of
copies cannot fill the check), each under the label map a person would accept (by name, by the
names' meaning, or by the examples where the names do not decide: `choose_label_map`), and
`rank_for_task` orders them by how they did. The identification benchmark measures what this
adds (docs/benchmarks/identification.md).
"""

from __future__ import annotations

from collections.abc import Sequence
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
from app.ml.shot_check import check_package

if TYPE_CHECKING:
    from app.ml.spec_space import SpecSpace  # torch-heavy: only in workers


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
    for done, learnware_id in enumerate(chosen, start=1):
        try:
            if learnware_id not in packages:
                raise InvalidPackage(f"learnware {learnware_id} is no longer ready")
            with extracted(ctx.runtime, packages[learnware_id], label=f"job-{ctx.claim.job_id}") as package:
                checked = check_package(package, texts, labels, label_names, space)
            maps[learnware_id], scores[learnware_id] = checked
        except (InvalidPackage, InvalidInput, OSError, RuntimeError, ValueError) as error:
            ctx.log(f"shot check skipped learnware {learnware_id}: {error}")
        ctx.progress(0.86 + 0.1 * done / len(chosen), f"shot check {done}/{len(chosen)}", force=True)
    return maps, scores
