"""Learnware operations behind the endpoints: submit, read, download, delete, review.

A submission is checked in the request (zip safety, manifest, layout, the content checks of
``app.ml.package_content``, an uploaded spec's space, shape and values), so every bad package is
refused with its reason before anything is stored.
Running the model and fitting the spec happen in the worker (``pipeline``).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.api.types import find_unstorable
from app.db.base import utcnow
from app.db.models import ApiKey, Job, JobState, Learnware, LearnwareStatus, Role, Spec, SpecKind, SpecSource
from app.db.session import on_commit, on_rollback
from app.errors import Conflict, Forbidden, InvalidPackage, NotFound
from app.index.registry import bump_index_version
from app.jobs import service as jobs
from app.jobs.stages import VALIDATE_LEARNWARE
from app.learnwares import repository
from app.ml.binary_index import FLOAT32, SIGN_BITS, is_sign_vector, spec_to_bytes
from app.ml.fingerprint import weights_fingerprint
from app.ml.packages import LearnwarePackage, extract_package
from app.ml.pave import UploadedSpec, read_spec_file
from app.ml.validation import require_inputs
from app.runtime import Runtime
from app.spec_spaces import service as spaces
from app.storage.store import sha256_file

INGEST = "learnware.ingest"


def spec_row(
    space_id: str,
    vector: np.ndarray,
    *,
    kind: SpecKind,
    source: SpecSource,
    meta: dict[str, object],
    encoding: str | None = None,
) -> Spec:
    """A spec row, stored in its space's ``encoding`` (packed bits for sign specs: 4.6 KB, not
    147 KB, for the default space). Without one, a vector of ±1 is packed (lossless: the two
    forms are told apart by their length)."""
    if encoding is None:
        encoding = SIGN_BITS if is_sign_vector(vector) else FLOAT32
    blob = spec_to_bytes(vector, encoding)
    return Spec(
        space_id=space_id,
        kind=kind,
        source=source,
        dim=int(vector.shape[0]),
        vector=blob,
        sha256=hashlib.sha256(blob).hexdigest(),
        meta=meta,
    )


def _check_package(runtime: Runtime, zip_path: Path) -> tuple[LearnwarePackage, UploadedSpec | None, Path]:
    """Extract into a scratch folder (the caller removes it); refuse what the dock cannot run."""
    scratch = Path(tempfile.mkdtemp(prefix="check-", dir=runtime.settings.scratch_dir))
    try:
        package = extract_package(zip_path, scratch / "package", runtime.settings.package_limits())
        require_inputs(package)
        packaged_spec = None
        if package.spec_stem is not None:
            packaged_spec = read_spec_file(package.spec_stem.with_suffix(".safetensors"))
        return package, packaged_spec, scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def submit(
    session: Session,
    runtime: Runtime,
    owner: ApiKey,
    package_zip: Path,
    spec_file: Path | None,
    *,
    private: bool = False,
) -> tuple[Learnware, Job]:
    """Check a package (and an optional spec), store it, and queue its validation.

    A ``private`` learnware is seen by its owner alone and never indexed.
    """
    package, packaged_spec, scratch = _check_package(runtime, package_zip)
    try:
        uploaded = read_spec_file(spec_file) if spec_file is not None else packaged_spec
        vector = None
        if uploaded is not None:
            record, vector = spaces.check_uploaded(session, uploaded, runtime.default_space_id)
        else:
            record = spaces.space_for_spec(session, None, runtime.default_space_id)
        manifest = package.manifest
        problem = find_unstorable(manifest.model_dump(mode="json"), "manifest")
        if problem:
            raise InvalidPackage(f"learnware.yaml: {problem}")
        sha = sha256_file(package_zip)
        existing = repository.duplicate_of(session, owner.id, sha)
        if existing is not None:
            raise Conflict(
                f"this package was already submitted as learnware {existing.id} ({existing.status.value})"
            )
        weights = weights_fingerprint(package)
        # Only the market is kept free of copies: a private learnware (a user's own merge or
        # fine-tune, never indexed) may equal another, and may later be published by its owner.
        original = None if private else repository.same_weights(session, weights)
        if original is not None:
            # Refused rather than marked: a copy adds nothing to the market but a second,
            # identical entry in every ranking, and nothing is stored for it.
            whose = "your" if original.owner_id == owner.id else "another developer's"
            raise Conflict(
                f"the model's weights are those of {whose} learnware {original.id} "
                f"({original.name!r}, {original.status.value}): duplicate of learnware {original.id}; "
                "the same weights under another name or in another package are not a new learnware"
                + (" (delete it first to replace it)" if original.owner_id == owner.id else "")
            )
        uploaded_spec = None
        if vector is not None and uploaded is not None:
            uploaded_spec = spec_row(
                record.id,
                vector,
                kind=SpecKind.model,
                source=SpecSource.uploaded,
                meta={"from": "request" if spec_file is not None else "package", **uploaded.meta},
                encoding=spaces.space_encoding(record),
            )
            session.add(uploaded_spec)
            session.flush()
        learnware = Learnware(
            owner_id=owner.id,
            status=LearnwareStatus.pending,
            name=manifest.name,
            description=manifest.description,
            tags=list(manifest.tags),
            task_type=manifest.task_type,
            label_names=list(manifest.label_names),
            model_format=manifest.model_format,
            base_model=manifest.base_model,
            license=manifest.license,
            manifest=manifest.model_dump(mode="json"),
            package_sha256=sha,
            weights_sha256=weights,
            package_size=package_zip.stat().st_size,
            space_id=record.id,
            uploaded_spec_id=uploaded_spec.id if uploaded_spec else None,
            private=private,
            validation_log=[
                f"package accepted: {manifest.model_format}, {len(manifest.label_names)} labels, "
                f"{len(package.inputs)} declared inputs"
                + (", with the developer's spec" if uploaded_spec else "")
            ],
        )
        session.add(learnware)
        session.flush()
        job = jobs.create_job(
            session,
            kind=INGEST,
            first_stage=VALIDATE_LEARNWARE,
            owner=owner,
            max_attempts=runtime.settings.job_max_attempts,
            learnware_id=learnware.id,
            space_id=record.id,
        )
        _store_package(session, runtime, package_zip, sha)
        return learnware, job
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _store_package(session: Session, runtime: Runtime, package_zip: Path, sha: str) -> None:
    """Store the package once its rows are written (a row the database refuses stores nothing);
    if the transaction then fails, a blob this request added and no learnware names is removed."""
    new = not runtime.store.exists(sha)
    if runtime.store.put_file(package_zip) != sha:
        raise RuntimeError(f"the package changed while it was being stored (expected sha256 {sha})")
    if new:
        on_rollback(session, lambda: _remove_unreferenced(runtime, sha))


def _remove_unreferenced(runtime: Runtime, sha: str) -> None:
    with runtime.db.session() as session:
        if repository.package_in_use(session, sha, except_id=0):
            return
    runtime.store.delete(sha)


def get_visible(session: Session, key: ApiKey, learnware_id: int) -> Learnware:
    learnware = repository.get(session, learnware_id)
    if learnware is None or learnware.status == LearnwareStatus.deleted:
        raise NotFound(f"no learnware {learnware_id}")
    hidden = learnware.status != LearnwareStatus.ready or learnware.private
    if hidden and key.role != Role.admin and learnware.owner_id != key.id:
        raise NotFound(f"no learnware {learnware_id}")
    return learnware


def open_package(
    session: Session, runtime: Runtime, key: ApiKey, learnware_id: int
) -> tuple[Learnware, BinaryIO]:
    """A learnware this key may see and its package stream; counts the download (the caller commits)."""
    learnware = get_visible(session, key, learnware_id)
    stream = runtime.store.open(learnware.package_sha256)
    session.execute(
        update(Learnware)
        .where(Learnware.id == learnware.id)
        .values(download_count=Learnware.download_count + 1)
        .execution_options(synchronize_session=False)
    )
    return learnware, stream


def _require_owner(key: ApiKey, learnware: Learnware, action: str) -> None:
    if key.role != Role.admin and learnware.owner_id != key.id:
        raise Forbidden(f"learnware {learnware.id} belongs to another developer; you cannot {action} it")


def delete(session: Session, runtime: Runtime, key: ApiKey, learnware_id: int) -> Learnware:
    """Delete (owner or admin): out of the index at once, its package removed once unused."""
    learnware = get_visible(session, key, learnware_id)
    _require_owner(key, learnware, "delete")
    learnware.status = LearnwareStatus.deleted
    learnware.status_reason = f"deleted by key {key.prefix}"
    learnware.deleted_at = utcnow()
    learnware.index_seq = bump_index_version(session, learnware.space_id)
    for job in repository.open_jobs(session, learnware.id):
        job.state = JobState.cancelled
        job.finished_at = utcnow()
        job.message = "cancelled: the learnware was deleted"
    if not repository.package_in_use(session, learnware.package_sha256, except_id=learnware.id):
        sha, store = learnware.package_sha256, runtime.store

        def remove_package() -> None:
            store.delete(sha)

        on_commit(session, remove_package)
    return learnware


def approve(session: Session, key: ApiKey, learnware_id: int) -> Learnware:
    """Index a learnware that waits for review (admin)."""
    learnware = get_visible(session, key, learnware_id)
    if learnware.status != LearnwareStatus.awaiting_review:
        raise Conflict(f"learnware {learnware_id} is {learnware.status.value}, not awaiting review")
    version = bump_index_version(session, learnware.space_id)
    learnware.status = LearnwareStatus.ready
    learnware.status_reason = f"approved by key {key.prefix}"
    learnware.ready_at = utcnow()
    learnware.index_seq = version
    return learnware


def reject(session: Session, key: ApiKey, learnware_id: int, reason: str | None) -> Learnware:
    """Refuse a learnware that waits for review (admin)."""
    learnware = get_visible(session, key, learnware_id)
    if learnware.status != LearnwareStatus.awaiting_review:
        raise Conflict(f"learnware {learnware_id} is {learnware.status.value}, not awaiting review")
    session.execute(
        update(Learnware)
        .where(Learnware.id == learnware.id)
        .values(status=LearnwareStatus.rejected, status_reason=reason or f"rejected by key {key.prefix}")
    )
    session.refresh(learnware)
    return learnware
