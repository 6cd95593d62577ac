"""A learnware's way from submitted to indexed, as job stages run by workers.

1. ``validate`` (cpu queue): extract the stored package again, load it with the runner of its
   format (no uploaded code runs) and predict on its declared inputs; the predictions are stored.
2. ``fit_spec`` (gpu queue): keep the developer's spec after checking it, or fit the spec to the
   model's own predictions on the declared inputs (``fit_pave_spec(kind="model")``; only the
   inputs member is read, the model is not unpacked again); then mark the learnware ready and
   stamp it into its space's index (or leave it awaiting review).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.models import Learnware, LearnwareStatus, Spec, SpecKind, SpecSource, SpecSpaceRecord
from app.errors import DockError, IncompatibleSpec, InvalidPackage, ServiceUnavailable
from app.index.registry import bump_index_version, vector_from_bytes
from app.jobs import service as jobs
from app.jobs.runner import TRANSIENT, JobContext
from app.jobs.stages import FIT_LEARNWARE_SPEC
from app.learnwares.packages import extracted, scratch_folder
from app.learnwares.service import spec_row
from app.ml.binary_index import encoding_of_config
from app.ml.packages import read_package_inputs
from app.ml.validation import run_on_inputs
from app.spec_spaces.service import check_spec

log = logging.getLogger(__name__)


def _learnware(session: Session, ctx: JobContext) -> Learnware:
    assert ctx.learnware_id is not None, "a learnware job without a learnware"
    learnware = session.get(Learnware, ctx.learnware_id)
    if learnware is None:
        raise InvalidPackage(f"learnware {ctx.learnware_id} no longer exists")
    return learnware


@dataclass(frozen=True)
class _Snapshot:
    """What a stage needs of its learnware, read in one short transaction."""

    id: int
    package_sha256: str
    predictions_sha256: str | None
    label_names: list[str]
    space_id: str
    space_dim: int
    space_config: dict[str, Any]
    uploaded_vector: np.ndarray | None


def _begin(ctx: JobContext, status: LearnwareStatus) -> _Snapshot | None:
    """Mark the learnware as being in ``status``; None (and the job done) if it was deleted."""
    with ctx.runtime.db.session() as session:
        learnware = _learnware(session, ctx)
        if learnware.status == LearnwareStatus.deleted:
            jobs.succeed(
                session,
                ctx.claim,
                result={"learnware_id": learnware.id},
                message="learnware was deleted; nothing to do",
            )
            return None
        learnware.status = status
        record = session.get(SpecSpaceRecord, learnware.space_id)
        assert record is not None
        uploaded = session.get(Spec, learnware.uploaded_spec_id) if learnware.uploaded_spec_id else None
        return _Snapshot(
            id=learnware.id,
            package_sha256=learnware.package_sha256,
            predictions_sha256=learnware.predictions_sha256,
            label_names=list(learnware.label_names),
            space_id=record.id,
            space_dim=record.dim,
            space_config=dict(record.config),
            uploaded_vector=check_spec(
                vector_from_bytes(uploaded.vector, record.dim), record, uploaded.space_id
            )
            if uploaded
            else None,
        )


@contextmanager
def _package_at_fault(doing: str) -> Iterator[None]:
    """A library error while loading or running the package's own model is the package's fault
    (its files passed the checks but do not load or run): the learnware is rejected with what
    failed, in words the developer can act on, instead of failing as an internal error."""
    try:
        yield
    except DockError:
        raise
    except TRANSIENT:
        raise
    except (MemoryError, RecursionError) as exc:
        raise InvalidPackage(
            f"{doing} exhausted the worker ({type(exc).__name__}): the model is too large or too deep "
            "for this dock"
        ) from exc
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "no message"
        raise InvalidPackage(
            f"{doing} failed: {type(exc).__name__}: {detail}. Check that the package's model files "
            "load and run with their library outside the dock, then submit it again"
        ) from exc


def validate(ctx: JobContext) -> None:
    """Run the model on its declared inputs; store the predictions for the spec stage."""
    from app.ml.runners import load_runner  # torch-heavy: only in workers

    settings = ctx.runtime.settings
    snap = _begin(ctx, LearnwareStatus.validating)
    if snap is None:
        return
    ctx.progress(0.02, "extracting the package", force=True)
    with extracted(ctx.runtime, snap.package_sha256, label=f"job-{ctx.claim.job_id}") as package:
        manifest = package.manifest
        started = time.perf_counter()
        with _package_at_fault(f"loading the {manifest.model_format} model from the package"):
            runner = load_runner(package)
        ctx.log(f"loaded the {manifest.model_format} model in {time.perf_counter() - started:.1f} s")
        texts = package.inputs[: settings.validation_inputs]

        def report(done: int, total: int, message: str) -> None:
            ctx.progress(0.05 + 0.3 * done / total, message)

        # The dock's own refusals (InvalidPackage) pass through; a library error is the package's.
        with _package_at_fault(f"running the model on its {len(texts)} declared inputs"):
            run = run_on_inputs(runner, manifest.label_names, texts, progress=report)
    all_labels, all_probs, seconds, spread = run.labels, run.probs, run.seconds, run.spread
    buffer = io.BytesIO()
    arrays = {"labels": all_labels} if all_probs is None else {"labels": all_labels, "probs": all_probs}
    np.savez(buffer, allow_pickle=False, **arrays)
    predictions_sha = ctx.runtime.store.put_bytes(buffer.getvalue())
    lines = [
        f"ran the model on {len(texts)} declared inputs in {seconds:.1f} s "
        f"({'probabilities' if all_probs is not None else 'labels only'})",
        f"predicted classes: {spread}",
    ]
    ctx.log(*lines)
    with ctx.runtime.db.session() as session:
        learnware = _learnware(session, ctx)
        if learnware.status == LearnwareStatus.deleted:
            jobs.succeed(
                session, ctx.claim, result={"learnware_id": snap.id}, message="learnware was deleted"
            )
            return
        learnware.status = LearnwareStatus.fitting
        learnware.predictions_sha256 = predictions_sha
        learnware.validation_log = [*learnware.validation_log, "validated: " + lines[0], lines[1]]
        jobs.advance(session, ctx.claim, FIT_LEARNWARE_SPEC, progress=0.4, message="validated")


def _load_predictions(ctx: JobContext, sha256: str) -> np.ndarray:
    with np.load(io.BytesIO(ctx.runtime.store.get_bytes(sha256)), allow_pickle=False) as data:
        return np.asarray(data["probs"] if "probs" in data.files else data["labels"])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _fit(ctx: JobContext, snap: _Snapshot) -> tuple[np.ndarray, dict[str, Any]]:
    """Fit the model vector to the learnware's own predictions on its declared inputs."""
    from app.ml.pave import fit_pave_spec
    from app.ml.spec_space import config_from_dict, load_space

    if snap.predictions_sha256 is None:
        raise InvalidPackage("the learnware has no stored predictions: its validation did not finish")
    ctx.progress(0.42, "loading the spec space", force=True)
    space = load_space(config_from_dict(snap.space_config))
    if space.id != snap.space_id:
        raise IncompatibleSpec(
            f"this worker's space is {space.id}, the learnware's is {snap.space_id} (another base?)"
        )
    targets = _load_predictions(ctx, snap.predictions_sha256)
    with scratch_folder(ctx.runtime, label=f"job-{ctx.claim.job_id}") as scratch:
        zip_path = ctx.runtime.store.fetch(snap.package_sha256, scratch / "package.zip")
        # Only the inputs member is read: validation already unpacked and checked the model.
        inputs = read_package_inputs(zip_path, ctx.runtime.settings.package_limits())
    texts = inputs[: min(ctx.runtime.settings.spec_fit_inputs, len(targets))]
    spec = fit_pave_spec(
        space,
        texts,
        targets[: len(texts)],
        snap.label_names,
        kind="model",
        progress=ctx.scaled(0.45, 0.95, "fitting the spec"),
    )
    return spec.vector, spec.meta


def fit_spec(ctx: JobContext) -> None:
    """Keep a checked developer spec or fit one; then index the learnware (or await review)."""
    settings = ctx.runtime.settings
    snap = _begin(ctx, LearnwareStatus.fitting)
    if snap is None:
        return
    computed: Spec | None = None
    if snap.uploaded_vector is not None and not settings.recompute_uploaded_specs:
        lines = ["kept the developer's spec: space, shape and values checked"]
    else:
        vector, meta = _fit(ctx, snap)
        computed = spec_row(
            snap.space_id,
            vector,
            kind=SpecKind.model,
            source=SpecSource.computed,
            meta=meta,
            encoding=encoding_of_config(snap.space_config),
        )
        lines = [
            f"fitted the spec on {meta['n_examples']} inputs to the model's own predictions in {meta['seconds']} s"
        ]
        if snap.uploaded_vector is not None:
            agreement = _cosine(snap.uploaded_vector, vector)
            lines.append(f"the developer's spec agrees with the recomputed one: cosine {agreement:.3f}")
    ctx.log(*lines)
    await_review = settings.review_required
    status = LearnwareStatus.awaiting_review if await_review else LearnwareStatus.ready
    with ctx.runtime.db.session() as session:
        learnware = _learnware(session, ctx)
        if computed is not None:
            session.add(computed)
            session.flush()
        spec_id = computed.id if computed is not None else learnware.uploaded_spec_id
        now = utcnow()
        moved = session.execute(
            update(Learnware)
            .where(Learnware.id == learnware.id, Learnware.status == LearnwareStatus.fitting)
            .values(
                status=status,
                spec_id=spec_id,
                spec_recomputed=computed is not None,
                ready_at=None if await_review else now,
                validation_log=[*learnware.validation_log, *lines],
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        if getattr(moved, "rowcount", 0) != 1:  # deleted (or moved on) meanwhile: never index it
            session.refresh(learnware)
            jobs.succeed(
                session,
                ctx.claim,
                result={"learnware_id": learnware.id, "status": learnware.status.value},
                message=f"learnware is {learnware.status.value}; not indexed",
            )
            return
        if not await_review:
            version = bump_index_version(session, snap.space_id)
            session.execute(
                update(Learnware)
                .where(Learnware.id == learnware.id)
                .values(index_seq=version)
                .execution_options(synchronize_session=False)
            )
        jobs.succeed(
            session,
            ctx.claim,
            result={
                "learnware_id": learnware.id,
                "status": status.value,
                "spec_id": spec_id,
                "space_id": snap.space_id,
                "spec_recomputed": computed is not None,
            },
            message="awaiting an admin's review" if await_review else "ready and indexed",
        )
    if not await_review:  # committed: a shared engine takes it now (or at its catch-up)
        _publish(ctx, snap.space_id)


def _publish(ctx: JobContext, space_id: str) -> None:
    """Hand the stamped learnware to the vector engine. The stamp is committed, so an engine
    that is down loses nothing: ``catch_up`` applies it once the engine is back."""
    try:
        ctx.runtime.indexes.publish(space_id)
    except ServiceUnavailable as exc:
        log.warning("learnware of job %s: %s; indexed when the engine is back", ctx.claim.job_id, exc)
