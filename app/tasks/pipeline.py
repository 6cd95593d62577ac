"""A user task as job stages: fit its spec from the few shots (gpu queue), then rank (cpu)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.models import Learnware, Spec, SpecKind, SpecSource, SpecSpaceRecord, TaskStatus, UserTask
from app.errors import IncompatibleSpec, InvalidInput
from app.index.registry import vector_from_bytes
from app.jobs import service as jobs
from app.jobs.runner import JobContext
from app.learnwares import repository as learnwares
from app.learnwares.service import spec_row
from app.ml.agreement import checked_peers
from app.ml.binary_index import encoding_of_config
from app.ml.label_maps import label_set
from app.ml.ranking import (
    ALIGN_MAX_SEARCHED,
    Realignment,
    check_count,
    rank_for_task,
    realignments,
    with_searched,
)
from app.tasks.service import find_candidates, present, rank
from app.tasks.shot_check import agreement_check, peer_check, shot_check

if TYPE_CHECKING:
    from app.ml.spec_space import SpecSpace  # torch-heavy: only in workers


def _task(session: Session, ctx: JobContext) -> UserTask:
    assert ctx.task_id is not None, "a task job without a task"
    task = session.get(UserTask, ctx.task_id)
    if task is None:
        raise InvalidInput(f"task {ctx.task_id} no longer exists")
    return task


def fit_and_identify(ctx: JobContext) -> None:
    """Fit the task spec to the user's labelled examples, erase them (unless kept), then rank."""
    from app.ml.pave import fit_pave_spec
    from app.ml.spec_space import config_from_dict, load_space

    with ctx.runtime.db.session() as session:
        task = _task(session, ctx)
        if task.examples is None:
            raise InvalidInput(f"task {task.id} has no examples left to fit a spec to")
        task.status = TaskStatus.running
        texts = list(task.examples["texts"])
        labels = np.asarray(task.examples["labels"], dtype=np.int64)
        label_names = list(task.label_names)
        record = session.get(SpecSpaceRecord, task.space_id)
        assert record is not None
        config, space_id = record.config, record.id
    ctx.progress(0.05, "loading the spec space", force=True)
    space = load_space(config_from_dict(config))
    if space.id != space_id:
        raise IncompatibleSpec(f"this worker's space is {space.id}, the task's is {space_id} (another base?)")
    spec = fit_pave_spec(
        space, texts, labels, label_names, kind="task", progress=ctx.scaled(0.1, 0.8, "fitting the task spec")
    )
    ctx.log(f"fitted the task spec on {len(texts)} examples in {spec.meta['seconds']} s")
    realigned = _realigned(ctx, space, space_id, spec.vector, texts, labels, label_names)
    ctx.progress(0.85, "ranking learnwares", force=True)
    settings = ctx.runtime.settings
    widest = max(settings.shot_check_k, settings.shot_check_k_unnamed) if settings.shot_check_k else 0
    with ctx.runtime.db.session() as session:
        task = _task(session, ctx)
        top_k = task.top_k
        candidates, version = find_candidates(
            session, ctx.runtime, space_id, spec.vector, max(top_k, widest), label_names, realigned
        )
    check = check_count(candidates, label_names, settings.shot_check_k, settings.shot_check_k_unnamed)
    maps, shots = shot_check(ctx, space, candidates, texts, labels, label_names, check) if check else ({}, {})
    ranked = rank_for_task(candidates, label_names, maps=maps, shots=shots)
    if peers := checked_peers(ranked, settings.shot_check_k):  # their agreement weighs in on their order
        agreement = peer_check(ctx, peers, maps, len(label_names))
        ranked = rank_for_task(candidates, label_names, maps=maps, shots=shots, agreement=agreement)
    with ctx.runtime.db.session() as session:
        task = _task(session, ctx)
        row = spec_row(
            space_id,
            spec.vector,
            kind=SpecKind.task,
            source=SpecSource.computed,
            meta=spec.meta,
            encoding=encoding_of_config(config),
        )
        session.add(row)
        session.flush()
        task.spec_id = row.id
        if not ctx.runtime.settings.keep_task_examples:
            task.examples = None
        _finish(ctx, session, task, present(session, ranked[:top_k], label_names, len(texts)), version)


def _realigned(
    ctx: JobContext,
    space: SpecSpace,
    space_id: str,
    vector: np.ndarray,
    texts: list[str],
    labels: np.ndarray,
    label_names: list[str],
) -> list[tuple[Realignment, np.ndarray]]:
    """The task's spec refitted under the learnwares' own label names where none answers the
    task's labels by name (`realignments`), while the job still holds the examples. A reading of
    numbered codes is replaced by the alignments the label set's learnwares closest to the task's
    own spec ``vector`` agree with most (`with_searched`)."""
    from app.ml.pave import alignment_gains, fit_realigned_specs, realignable

    if not realignable(space.config.recipe):
        return []
    with ctx.runtime.db.session() as session:
        plan = realignments(label_names, learnwares.label_sets(session, space_id), space.name_similarity)
    if not plan:
        return []
    ctx.progress(0.8, f"refitting the task spec under {len(plan)} learnwares' label names", force=True)
    started = time.perf_counter()
    if any(r.reading for r in plan):
        with ctx.runtime.db.session() as session:
            plan = with_searched(
                plan,
                lambda reading: _of_label_set(session, ctx, space_id, vector, reading),
                lambda chosen: alignment_gains(space, texts, labels, len(label_names), chosen),
            )
    vectors = fit_realigned_specs(space, texts, labels, [r.names for r in plan])
    ctx.log(
        f"no learnware answers your labels by name: the task spec refitted under {len(plan)} of their "
        f"label sets in {time.perf_counter() - started:.2f} s"
    )
    return list(zip(plan, vectors, strict=True))


def _of_label_set(
    session: Session, ctx: JobContext, space_id: str, vector: np.ndarray, reading: Realignment
) -> list[tuple[int, np.ndarray, list[str]]]:
    """The ready learnwares of ``reading``'s label set closest to the task's own spec ``vector``,
    at most `ALIGN_MAX_SEARCHED`: (id, spec vector, label names)."""
    found, _ = ctx.runtime.indexes.search(space_id, vector, ALIGN_MAX_SEARCHED, label_names=reading.names)
    rows = learnwares.ready_by_ids(session, [m.id for m in found])
    ids = [m.id for m in found if m.id in rows and label_set(rows[m.id].label_names) == reading.label_set]
    vectors = learnwares.spec_vectors(session, ids)
    return [(i, vectors[i], list(rows[i].label_names)) for i in ids if i in vectors]


def identify(ctx: JobContext) -> None:
    """Rank the learnwares against a task's stored spec (a task posted as a spec only: no
    examples to check on). With label names, its close matches are ordered by how much the others
    bear them out on their declared inputs (`agreement_check`)."""
    ctx.progress(0.3, "ranking learnwares", force=True)
    k = ctx.runtime.settings.shot_check_k
    with ctx.runtime.db.session() as session:
        task = _task(session, ctx)
        spec = session.get(Spec, task.spec_id) if task.spec_id else None
        if spec is None:
            raise IncompatibleSpec(f"task {task.id} has no spec")
        task.status = TaskStatus.running
        vector = vector_from_bytes(spec.vector, spec.dim)
        label_names, top_k = list(task.label_names), task.top_k
        if not label_names or not k:
            results, version = rank(session, ctx.runtime, task.space_id, vector, top_k, label_names)
            _finish(ctx, session, task, results, version)
            return
        candidates, version = find_candidates(
            session, ctx.runtime, task.space_id, vector, max(top_k, k), label_names
        )
    agreement = agreement_check(ctx, candidates, label_names, k)
    ranked = rank_for_task(candidates, label_names, agreement=agreement)
    with ctx.runtime.db.session() as session:
        task = _task(session, ctx)
        _finish(ctx, session, task, present(session, ranked[:top_k], label_names), version)


def _finish(
    ctx: JobContext, session: Session, task: UserTask, results: list[dict[str, Any]], version: int
) -> None:
    """Record the ranking, in the caller's transaction (no ``ctx.progress`` here: it writes through
    another connection, which SQLite would block behind this transaction's write lock)."""
    task.results = results
    task.index_version = version
    if results:
        session.execute(
            update(Learnware)
            .where(Learnware.id == int(results[0]["learnware_id"]))
            .values(ranked_first_count=Learnware.ranked_first_count + 1)
            .execution_options(synchronize_session=False)
        )
    task.status = TaskStatus.ready
    task.identified_at = utcnow()
    task.error = None
    best = (
        f"best: learnware {results[0]['learnware_id']} ({results[0]['score']:.3f})"
        if results
        else "no learnwares"
    )
    jobs.succeed(
        session,
        ctx.claim,
        result={"task_id": task.id, "index_version": version, "matches": results},
        message=f"ranked {len(results)} learnwares against index version {version}; {best}",
    )
