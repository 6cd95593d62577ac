"""The shot check: a few of the top candidates run on the user's own examples.

A task spec says which learnwares do the user's kind of task, not which of several close ones is
best at it, nor whether a learnware that copied a good one's spec is any good. While a job holds
the user's examples (before it erases them), it runs up to `shot_check_k` candidates that can
answer the task on them (`choose_checked`: near-identical specs take one place, so a flood of
copies cannot fill the check), each under the label map a person would accept (by name, by the
names' meaning, or by the examples where the names do not decide: `choose_label_map`), and
`rank_for_task` orders them by how they did. The identification benchmark measures what this
adds (docs/benchmarks/identification.md).

A task posted as a spec only has no examples in the dock; its close matches are run on their own
pooled declared inputs instead and ordered by how much the others bear them out
(`agreement_check`, `app.ml.agreement`).

A worker keeps the models it ran last loaded (`LoadedRunners`, `shot_check_loaded_models` of
them, keyed by the package's digest, so a package is never stale): a popular learnware is then
not fetched, extracted and loaded again for each task that checks it
(docs/benchmarks/task-latency.md measures the difference). A worker process that starts loads the
models its dock's recent tasks checked most in the background (`warm_up`,
`shot_check_warm_models` of them), so a restart does not make the next tasks pay every load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import TaskStatus, UserTask
from app.errors import InvalidInput, InvalidPackage
from app.jobs.runner import JobContext
from app.learnwares import repository as learnwares
from app.learnwares.packages import extracted, scratch_folder
from app.ml.agreement import (
    AGREEMENT_INPUTS,
    agreement_chosen,
    agreement_scores,
    mapped_answers,
    pooled_inputs,
    user_answers,
)
from app.ml.label_maps import LabelMap
from app.ml.packages import read_package_inputs
from app.ml.ranking import Candidate, ShotScore, choose_checked
from app.ml.shot_check import RememberedAnswers, check_runner
from app.storage.store import ArtifactNotFound

if TYPE_CHECKING:
    from app.ml.runners.base import Predictions, Runner
    from app.ml.spec_space import SpecSpace  # torch-heavy: only in workers
    from app.runtime import Runtime

log = logging.getLogger(__name__)

UNCHECKABLE = (InvalidPackage, InvalidInput, ArtifactNotFound, OSError, RuntimeError, ValueError)
"""Why a model may not be checkable: its package gone from the store or no longer loading."""

RECENT_TASKS = 200
"""How many of the latest identified tasks `most_checked` reads to pick what a worker warms up."""


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


ANSWERS = RememberedAnswers()
"""What this worker process's models answered on declared inputs (`RememberedAnswers`)."""


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
    chosen, packages = _chosen(
        ctx, candidates, k, lambda pool, vectors: choose_checked(pool, label_names, vectors, k)
    )
    maps: dict[int, LabelMap | None] = {}
    scores: dict[int, ShotScore | None] = {}
    started, reused = time.perf_counter(), 0
    for done, learnware_id in enumerate(chosen, start=1):
        try:
            runner, was_loaded = _runner(ctx, learnware_id, packages)
            reused += was_loaded
            maps[learnware_id], scores[learnware_id] = check_runner(runner, texts, labels, label_names, space)
        except UNCHECKABLE as error:
            ctx.log(f"shot check skipped learnware {learnware_id}: {error}")
        ctx.progress(0.86 + 0.1 * done / len(chosen), f"shot check {done}/{len(chosen)}", force=True)
    ctx.log(
        f"shot check: {len(scores)} of {len(chosen)} matches run on the examples in "
        f"{time.perf_counter() - started:.2f} s ({reused} of them already loaded)"
    )
    return maps, scores


def agreement_check(
    ctx: JobContext, candidates: Sequence[Candidate], label_names: Sequence[str], k: int
) -> dict[int, float]:
    """For a task without examples (a spec only): the first ``k`` close matches that answer its
    labels by name (`agreement_chosen`) run on their pooled declared inputs, each scored by its
    mean κ with the others (`app.ml.agreement`). A learnware that cannot be run is left out, with
    a line in the job's log; with fewer than three left, nothing is scored."""
    peers, packages = _chosen(
        ctx, candidates, k, lambda pool, vectors: agreement_chosen(pool, label_names, vectors, k)
    )
    if not peers:
        return {}

    def answer(learnware_id: int, runner: Runner, predicted: Predictions) -> np.ndarray:
        return user_answers(predicted.labels, predicted.probs, label_names, list(runner.label_names))

    return _agreement(ctx, peers, packages, len(label_names), answer, "close matches", (0.5, 0.9))


def peer_check(
    ctx: JobContext, peers: Sequence[int], maps: dict[int, LabelMap | None], n_labels: int
) -> dict[int, float]:
    """The first checked matches better than chance (`app.ml.agreement.checked_peers`) run on
    their pooled declared inputs, answering through the label ``maps`` their check chose, each
    scored by its mean κ with the others (`ranking.weighed_by_agreement` adds it to their shot
    scores). The models are those the shot check just ran (`LOADED`)."""
    with ctx.runtime.db.session() as session:
        rows = learnwares.ready_by_ids(session, list(peers))
    packages = {i: rows[i].package_sha256 for i in peers if i in rows}

    def answer(learnware_id: int, runner: Runner, predicted: Predictions) -> np.ndarray:
        label_map = maps.get(learnware_id)
        if label_map is None:
            raise InvalidInput(f"learnware {learnware_id} has no label map")
        return mapped_answers(predicted.labels, predicted.probs, label_map)

    return _agreement(ctx, list(peers), packages, n_labels, answer, "checked matches", (0.96, 0.99))


def _agreement(
    ctx: JobContext,
    peers: list[int],
    packages: dict[int, str],
    n_labels: int,
    answer: Callable[[int, Runner, Predictions], np.ndarray],
    what: str,
    span: tuple[float, float],
) -> dict[int, float]:
    """Run ``peers`` on their pooled declared inputs (answers remembered from earlier checks reused:
    `ANSWERS`), each one's answers as the user's label ids (``answer``), and score each by its mean
    κ with the others (`agreement_scores`), the job's progress moving across ``span``. A learnware
    that cannot be run is left out, with a line in the job's log."""
    started = time.perf_counter()
    loaded: dict[int, tuple[Runner, list[str]]] = {}
    for learnware_id in peers:
        try:
            runner, _ = _runner(ctx, learnware_id, packages)
            inputs = _declared_inputs(ctx.runtime, packages[learnware_id], f"job-{ctx.claim.job_id}")
            loaded[learnware_id] = (runner, inputs)
        except UNCHECKABLE as error:
            ctx.log(f"agreement check skipped learnware {learnware_id}: {error}")
    texts = pooled_inputs([inputs for _, inputs in loaded.values()])
    answered: dict[int, np.ndarray] = {}
    for done, (learnware_id, (runner, _)) in enumerate(loaded.items(), start=1):
        try:
            predicted = ANSWERS.predict(packages[learnware_id], runner, texts)
            answered[learnware_id] = answer(learnware_id, runner, predicted)
        except UNCHECKABLE as error:
            ctx.log(f"agreement check skipped learnware {learnware_id}: {error}")
        ctx.progress(
            span[0] + (span[1] - span[0]) * done / len(loaded),
            f"agreement check {done}/{len(loaded)}",
            force=True,
        )
    scores = agreement_scores(answered, n_labels)
    ctx.log(
        f"agreement check: {len(scores)} of {len(peers)} {what} run on {len(texts)} of their "
        f"declared inputs in {time.perf_counter() - started:.2f} s"
    )
    return scores


def _chosen(
    ctx: JobContext,
    candidates: Sequence[Candidate],
    k: int,
    choose: Callable[[list[Candidate], dict[int, np.ndarray]], list[int]],
) -> tuple[list[int], dict[int, str]]:
    """The learnwares ``choose`` picks of the first 4k candidates, given their spec vectors, and
    the package digest of each that is still ready."""
    pool = list(candidates[: 4 * k])
    with ctx.runtime.db.session() as session:
        chosen = choose(pool, learnwares.spec_vectors(session, [c.id for c in pool]))
        rows = learnwares.ready_by_ids(session, chosen)
    return chosen, {i: rows[i].package_sha256 for i in chosen if i in rows}


def _runner(ctx: JobContext, learnware_id: int, packages: dict[int, str]) -> tuple[Runner, bool]:
    """A chosen learnware's model from this process's `LOADED` (loaded from its package where it
    is not yet), and whether it was loaded already."""
    if learnware_id not in packages:
        raise InvalidPackage(f"learnware {learnware_id} is no longer ready")
    sha256 = packages[learnware_id]
    load = partial(_load, ctx.runtime, sha256, f"job-{ctx.claim.job_id}")
    return LOADED.get(sha256, load, ctx.runtime.settings.shot_check_loaded_models)


_DECLARED: OrderedDict[str, list[str]] = OrderedDict()
_DECLARED_LOCK = threading.Lock()
_DECLARED_KEPT = 256
"""How many packages' first declared inputs this process keeps (at most `AGREEMENT_INPUTS` each)."""


def _declared_inputs(runtime: Runtime, sha256: str, label: str) -> list[str]:
    """The first `AGREEMENT_INPUTS` inputs package ``sha256`` declares: kept from when `_load`
    extracted it, or read from the stored zip's one inputs member."""
    with _DECLARED_LOCK:
        kept = _DECLARED.get(sha256)
    if kept is not None:
        return kept
    with scratch_folder(runtime, label=label) as scratch:
        zip_path = runtime.store.fetch(sha256, scratch / "package.zip")
        return _keep_declared(sha256, read_package_inputs(zip_path, runtime.settings.package_limits()))


def _keep_declared(sha256: str, inputs: Sequence[str]) -> list[str]:
    first = list(inputs[:AGREEMENT_INPUTS])
    with _DECLARED_LOCK:
        _DECLARED[sha256] = first
        _DECLARED.move_to_end(sha256)
        while len(_DECLARED) > _DECLARED_KEPT:
            _DECLARED.popitem(last=False)
    return first


def most_checked(session: Session, limit: int, recent: int = RECENT_TASKS) -> list[str]:
    """The package digests of the ready learnwares that the latest ``recent`` identified tasks
    checked most often (ties: the most recently checked first), at most ``limit``."""
    if limit <= 0:
        return []
    latest = session.scalars(
        select(UserTask.results)
        .where(UserTask.status == TaskStatus.ready, UserTask.results.is_not(None))
        .order_by(UserTask.identified_at.desc(), UserTask.id.desc())
        .limit(recent)
    ).all()
    counts: Counter[int] = Counter()
    for results in latest:
        for match in results or []:
            if (
                isinstance(match, dict)
                and match.get("checked")
                and isinstance(match.get("learnware_id"), int)
            ):
                counts[match["learnware_id"]] += 1
    ids = [i for i, _ in counts.most_common()]  # stable: equal counts keep the newest first
    rows = learnwares.ready_by_ids(session, ids)
    return [rows[i].package_sha256 for i in ids if i in rows][:limit]


def warm_up(runtime: Runtime, count: int | None = None) -> int:
    """Load into this process's `LOADED` the models recent tasks checked most (`most_checked`):
    ``count`` of them (default ``shot_check_warm_models``), never more than the process keeps
    (``shot_check_loaded_models``). How many were loaded; one that fails is skipped with a log
    line (a task that checks it will try again, and say why in its job's log)."""
    settings = runtime.settings
    capacity = settings.shot_check_loaded_models
    count = min(settings.shot_check_warm_models if count is None else count, capacity)
    if count <= 0:
        return 0
    with runtime.db.session() as session:
        digests = most_checked(session, count)
    started, loaded = time.perf_counter(), 0
    for sha256 in digests:
        try:
            _, was_loaded = LOADED.get(sha256, partial(_load, runtime, sha256, "warm-up"), capacity)
            loaded += not was_loaded
        except UNCHECKABLE as error:
            log.warning("shot check warm-up skipped package %s: %s", sha256[:12], error)
    if digests:
        log.info(
            "shot check warm-up: %d of the %d models recent tasks checked most loaded in %.1f s",
            loaded, len(digests), time.perf_counter() - started,
        )  # fmt: skip
    return loaded


def _load(runtime: Runtime, sha256: str, label: str) -> Runner:
    """The stored package fetched, extracted (checked again) and its model loaded from its weights
    alone (`load_runner`: safetensors or ONNX, no code runs); the scratch folder is removed after."""
    from app.ml.runners import load_runner  # torch-heavy

    with extracted(runtime, sha256, label=label) as package:
        _keep_declared(sha256, package.inputs)
        return load_runner(package)
