"""Learnware endpoints: submit (developers), list, read, download, delete (owner or admin), review."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Query, UploadFile
from fastapi.responses import StreamingResponse

from app.api.deps import RuntimeDep, SessionDep
from app.api.responses import errors
from app.api.types import MAX_ID, IdQuery, PageQuery, PathId, TextItem, TextQuery
from app.api.uploads import OptionalSpecFile, saved_upload
from app.auth.dependencies import AdminKey, CurrentKey, DeveloperKey
from app.db.models import LearnwareStatus
from app.learnwares import service
from app.learnwares.browse import BrowseQuery, Sort, browse
from app.learnwares.schemas import LearnwareRead, LearnwareSubmitted, Page, Pagination, ReviewDecision
from app.spec_spaces.service import stored_encoding

router = APIRouter(responses=errors(401), tags=["learnwares"])


@router.post(
    "/v1/learnwares", responses=errors(403, 409, 413, 422), response_model=LearnwareSubmitted, status_code=202
)
def submit_learnware(
    runtime: RuntimeDep,
    session: SessionDep,
    key: DeveloperKey,
    package: Annotated[UploadFile, File(description="the learnware package zip (learnware.yaml + model)")],
    spec: OptionalSpecFile,
) -> LearnwareSubmitted:
    """Submit a learnware package; it is checked now and validated, specified and indexed by a job."""
    settings = runtime.settings
    with saved_upload(
        package,
        settings.scratch_dir,
        max_bytes=settings.max_upload_bytes,
        what="package",
        filename="package.zip",
    ) as zip_path:
        assert zip_path is not None
        learnware, job = service.submit(session, runtime, key, zip_path, spec)
        return LearnwareSubmitted(
            learnware_id=learnware.id,
            job_id=job.id,
            status=learnware.status,
            spec_uploaded=learnware.uploaded_spec_id is not None,
            spec_stored=stored_encoding(session, learnware.uploaded_spec_id),
        )


@router.get("/v1/learnwares", responses=errors(422), response_model=Page[LearnwareRead])
def list_learnwares(
    key: CurrentKey,
    session: SessionDep,
    status: LearnwareStatus | None = None,
    mine: Annotated[bool, Query(description="only learnwares of this key")] = False,
    task_type: TextQuery = None,
    model_format: TextQuery = None,
    tag: TextQuery = None,
    q: Annotated[
        TextQuery, Query(description="words in the name, description, tags or label names (all of them)")
    ] = None,
    space_id: TextQuery = None,
    base_model: TextQuery = None,
    license: TextQuery = None,
    n_classes: Annotated[int | None, Query(ge=2, le=MAX_ID, description="number of label names")] = None,
    label: Annotated[
        list[TextItem], Query(description="label names every result has (case-insensitive)")
    ] = [],  # noqa: B006
    owner_id: IdQuery = None,
    sort: Annotated[
        Sort, Query(description="newest, downloads, ranked_first (most often ranked first) or name")
    ] = "newest",
    page: PageQuery = 1,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> Page[LearnwareRead]:
    """Ready learnwares (and your own in any state; admins see all), newest first unless sorted."""
    found = browse(
        session,
        key,
        BrowseQuery(
            q=q or "",
            task_type=task_type or "",
            model_format=model_format or "",
            base_model=base_model or "",
            space_id=space_id or "",
            n_classes=n_classes,
            labels=tuple(label),
            license=license or "",
            tag=tag or "",
            owner_id=owner_id,
            status=status,
            mine=mine,
            sort=sort,
            page=page,
            per_page=limit,
            clamp=False,
        ),
    )
    return Page[LearnwareRead](
        items=[LearnwareRead.model_validate(r) for r in found.items],
        pagination=Pagination(total_count=found.total, page=page, limit=limit, max_page=found.pages),
    )


@router.get("/v1/learnwares/{learnware_id}", responses=errors(404, 422), response_model=LearnwareRead)
def get_learnware(learnware_id: PathId, key: CurrentKey, session: SessionDep) -> LearnwareRead:
    """One learnware: manifest fields, status (with the reason when refused), validation log."""
    return LearnwareRead.model_validate(service.get_visible(session, key, learnware_id))


@router.get(
    "/v1/learnwares/{learnware_id}/package",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/zip": {}}, "description": "the package zip"},
        **errors(404, 422),
    },
)
def download_package(
    learnware_id: PathId, key: CurrentKey, session: SessionDep, runtime: RuntimeDep
) -> StreamingResponse:
    """Download the learnware's package zip (its sha256 is in the ``X-Content-SHA256`` header)."""
    learnware, stream = service.open_package(session, runtime, key, learnware_id)

    def chunks() -> object:
        try:
            while chunk := stream.read(1 << 20):
                yield chunk
        finally:
            stream.close()

    return StreamingResponse(
        chunks(),  # type: ignore[arg-type]
        media_type="application/zip",
        headers={
            "Content-Disposition": f'attachment; filename="learnware-{learnware.id}.zip"',
            "Content-Length": str(learnware.package_size),
            "X-Content-SHA256": learnware.package_sha256,
        },
    )


@router.delete("/v1/learnwares/{learnware_id}", responses=errors(403, 404, 422), response_model=LearnwareRead)
def delete_learnware(
    learnware_id: PathId, key: CurrentKey, session: SessionDep, runtime: RuntimeDep
) -> LearnwareRead:
    """Delete a learnware (its owner or an admin): it leaves the index at once."""
    return LearnwareRead.model_validate(service.delete(session, runtime, key, learnware_id))


@router.post(
    "/v1/admin/learnwares/{learnware_id}/approve",
    responses=errors(403, 404, 409, 422),
    response_model=LearnwareRead,
)
def approve_learnware(learnware_id: PathId, admin: AdminKey, session: SessionDep) -> LearnwareRead:
    """Approve a learnware awaiting review: it is indexed (admin only)."""
    return LearnwareRead.model_validate(service.approve(session, admin, learnware_id))


@router.post(
    "/v1/admin/learnwares/{learnware_id}/reject",
    responses=errors(403, 404, 409, 422),
    response_model=LearnwareRead,
)
def reject_learnware(
    learnware_id: PathId, body: ReviewDecision, admin: AdminKey, session: SessionDep
) -> LearnwareRead:
    """Reject a learnware awaiting review, with a reason (admin only)."""
    return LearnwareRead.model_validate(service.reject(session, admin, learnware_id, body.reason))
