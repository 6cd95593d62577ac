"""User task operations: post a few-shot task or a task spec, read it (owner only), rank now."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Job, SpecKind, SpecSource, TaskStatus, UserTask
from app.errors import Forbidden, InvalidInput, NotFound
from app.jobs import service as jobs
from app.jobs.stages import FIT_TASK_SPEC, IDENTIFY_TASK
from app.learnwares import repository as learnwares
from app.learnwares.service import spec_row
from app.ml.encoders import check_texts
from app.ml.head import check_label_names, class_ids
from app.ml.label_maps import label_set
from app.ml.pave import read_spec_file
from app.ml.ranking import (
    Candidate,
    Ranked,
    Realignment,
    aligned_score,
    as_ranked,
    by_tier,
    near_copies,
    originals_first,
    rank_for_task,
    with_alignment,
)
from app.runtime import Runtime
from app.spec_spaces import service as spaces
from app.tasks import repository
from app.tasks.schemas import IdentifyResult, MatchRead, TaskCreate, TaskRead

IDENTIFY = "task.identify"


def create_few_shot(
    session: Session, runtime: Runtime, owner: ApiKey, body: TaskCreate
) -> tuple[UserTask, Job]:
    """Check the examples now; a worker fits the task spec and ranks the learnwares."""
    settings = runtime.settings
    if len(body.texts) > settings.max_task_examples:
        raise InvalidInput(f"{len(body.texts)} examples, over the limit of {settings.max_task_examples}")
    texts = check_texts(body.texts)
    too_long = [i for i, t in enumerate(texts) if len(t) > settings.max_text_chars]
    if too_long:
        raise InvalidInput(f"text {too_long[0]} has over {settings.max_text_chars} characters")
    names = check_label_names(body.label_names)
    ids = class_ids(body.labels, names)
    record = spaces.get_space(session, runtime.default_space_id)
    task = UserTask(
        owner_id=owner.id,
        status=TaskStatus.pending,
        label_names=names,
        examples={"texts": texts, "labels": ids},
        n_examples=len(texts),
        space_id=record.id,
        top_k=body.top_k,
    )
    session.add(task)
    session.flush()
    job = jobs.create_job(
        session,
        kind=IDENTIFY,
        first_stage=FIT_TASK_SPEC,
        owner=owner,
        max_attempts=settings.job_max_attempts,
        task_id=task.id,
        space_id=record.id,
    )
    return task, job


def create_from_spec(
    session: Session, runtime: Runtime, owner: ApiKey, spec_file: Path, top_k: int, label_names: list[str]
) -> tuple[UserTask, Job]:
    """A task given as a spec computed on the user's machine: the examples never reach the dock."""
    uploaded = read_spec_file(spec_file)
    record, vector = spaces.check_uploaded(session, uploaded, runtime.default_space_id)
    spec = spec_row(
        record.id,
        vector,
        kind=SpecKind.task,
        source=SpecSource.uploaded,
        meta=dict(uploaded.meta),
        encoding=spaces.space_encoding(record),
    )
    session.add(spec)
    session.flush()
    task = UserTask(
        owner_id=owner.id,
        status=TaskStatus.pending,
        label_names=label_names,
        examples=None,
        n_examples=0,
        space_id=record.id,
        spec_id=spec.id,
        top_k=top_k,
    )
    session.add(task)
    session.flush()
    job = jobs.create_job(
        session,
        kind=IDENTIFY,
        first_stage=IDENTIFY_TASK,
        owner=owner,
        max_attempts=runtime.settings.job_max_attempts,
        task_id=task.id,
        space_id=record.id,
    )
    return task, job


def get_owned(session: Session, key: ApiKey, task_id: int) -> UserTask:
    """A task is visible to the key that posted it alone (admins included: it is the user's data)."""
    task = repository.get(session, task_id)
    if task is None:
        raise NotFound(f"no task {task_id}")
    if task.owner_id != key.id:
        raise Forbidden(f"task {task_id} belongs to another key; only its owner may read it")
    return task


def find_candidates(
    session: Session,
    runtime: Runtime,
    space_id: str,
    vector: np.ndarray,
    k: int,
    label_names: Sequence[str] = (),
    realigned: Sequence[tuple[Realignment, np.ndarray]] = (),
) -> tuple[list[Candidate], int]:
    """Ready learnwares near a spec and the index version searched: with the task's
    ``label_names`` the engine's best of each tier (or its top 4k where it cannot filter by
    labels), ordered by what they can answer (`by_tier`) with copies of one spec behind their
    original (`originals_first`); without them in cosine order.

    ``realigned`` holds the task's spec refitted under other label sets' names
    (`pave.fit_realigned_specs`, as `realignments` plans it): each is searched (both ways round
    where either alignment of two labels may hold), and the learnwares of its label set it finds
    are scored by it (`aligned_score`, `with_alignment`)."""
    found, version = runtime.indexes.search(space_id, vector, k, label_names=label_names)
    aligned: dict[int, tuple[Realignment, float]] = {}
    searched = learnwares.spec_vectors(
        session, sorted({i for r, _ in realigned if r.learnwares is not None for i in r.learnwares})
    )
    for realignment, refitted in realigned:
        if realignment.learnwares is not None:  # aligned for these learnwares: score them alone
            unit = refitted / np.linalg.norm(refitted)
            aligned.update(
                (i, (realignment, float(unit @ searched[i]) / float(np.linalg.norm(searched[i]))))
                for i in realignment.learnwares
                if i in searched
            )
            continue
        for sign in (1.0, -1.0) if realignment.both_ways else (1.0,):
            matches, _ = runtime.indexes.search(space_id, sign * refitted, k, label_names=realignment.names)
            # The cosine with the refitted spec itself, whichever way round found it.
            aligned.update((m.id, (realignment, sign * m.score)) for m in matches)
    rows = learnwares.ready_by_ids(session, [m.id for m in found] + list(aligned))
    # A learnware deleted after the index was last synced is dropped here.
    candidates = [Candidate(m.id, m.score, tuple(rows[m.id].label_names)) for m in found if m.id in rows]
    if not label_names:
        return candidates, version
    candidates = with_alignment(
        candidates,
        [
            Candidate(
                i,
                aligned_score(realignment, cosine),
                tuple(rows[i].label_names),
                reading=realignment.reading,
                searched=realignment.learnwares is not None,
            )
            for i, (realignment, cosine) in aligned.items()
            if i in rows and label_set(rows[i].label_names) == realignment.label_set
        ],
    )
    vectors = learnwares.spec_vectors(session, [c.id for c in candidates])
    return originals_first(by_tier(candidates, label_names), label_names, vectors), version


def present(
    session: Session, ranked: Sequence[Ranked], label_names: Sequence[str], n_examples: int = 0
) -> list[dict[str, Any]]:
    """The matches as the API returns them (`MatchRead`), each with why it is where it is, and
    which of them have near-identical specs (`near_copies`: a client checking a spec-only task's
    matches runs one of each group, as the dock's own check does)."""
    ids = [r.id for r in ranked]
    rows = learnwares.ready_by_ids(session, ids)
    copies = near_copies(ids, learnwares.spec_vectors(session, ids))
    wanted = label_set(label_names)
    results: list[dict[str, Any]] = []
    for match in ranked:
        learnware = rows.get(match.id)
        if learnware is None:  # deleted while the task ran
            continue
        names = list(learnware.label_names)
        why = match.fields(label_names, names, n_examples)
        if match.id in copies:
            why["reason"] = (
                f"{why['reason']}; its spec is near-identical to learnware {copies[match.id]}'s, "
                "listed above (a copy, or one of many alike: one of them is checked)"
            )
        results.append(
            {
                "rank": len(results) + 1,
                "learnware_id": learnware.id,
                "name": learnware.name,
                "task_type": learnware.task_type,
                "model_format": learnware.model_format,
                "label_names": names,
                "labels_match": bool(wanted) and label_set(names) == wanted,
                "spec_recomputed": learnware.spec_recomputed,
                "spec_copy_of": copies.get(match.id),
                **why,
                "tags": list(learnware.tags),
            }
        )
    return results


def rank(
    session: Session,
    runtime: Runtime,
    space_id: str,
    vector: np.ndarray,
    k: int,
    label_names: Sequence[str] = (),
) -> tuple[list[dict[str, Any]], int]:
    """The top-``k`` ready learnwares for a spec (no shot check: no examples), best first, and the
    index version searched. With the task's ``label_names``, in `rank_for_task`'s order."""
    candidates, version = find_candidates(session, runtime, space_id, vector, k, label_names)
    ranked = rank_for_task(candidates, label_names) if label_names else as_ranked(candidates)
    return present(session, ranked[:k], label_names), version


def identify_now(session: Session, runtime: Runtime, spec_file: Path, k: int) -> IdentifyResult:
    """Rank learnwares for an uploaded spec in this request (nothing is stored)."""
    uploaded = read_spec_file(spec_file)
    record, vector = spaces.check_uploaded(session, uploaded, runtime.default_space_id)
    results, version = rank(session, runtime, record.id, vector, k)
    return IdentifyResult(
        space_id=record.id,
        spec_received=uploaded.encoding,
        space_encoding=spaces.space_encoding(record),
        index_version=version,
        matches=[MatchRead.model_validate(r) for r in results],
    )


def to_read(session: Session, task: UserTask) -> TaskRead:
    return TaskRead(
        id=task.id,
        status=task.status,
        label_names=list(task.label_names),
        n_examples=task.n_examples,
        space_id=task.space_id,
        top_k=task.top_k,
        spec_id=task.spec_id,
        job_id=repository.latest_job_id(session, task.id),
        matches=[MatchRead.model_validate(r) for r in task.results or []],
        index_version=task.index_version,
        error=task.error,
        examples_kept=task.examples is not None,
        created_at=task.created_at,
        identified_at=task.identified_at,
    )
