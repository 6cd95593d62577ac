"""For developers: submit a package (checked in the request, as the API checks it), then its
page follows validation, spec and indexing live."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Request, UploadFile
from fastapi.responses import RedirectResponse, Response

from app.api.deps import RuntimeDep, SessionDep
from app.api.errors import status_and_code
from app.api.uploads import saved_upload
from app.learnwares import service as learnwares
from app.ml.errors import DockError, IncompatibleSpec
from app.web.render import WebRoute, page
from app.web.session import CsrfChecked, DeveloperSignedIn

router = APIRouter(route_class=WebRoute, include_in_schema=False)

SUBMIT = "/submit"


def _limits(max_upload_bytes: int) -> str:
    mib = max_upload_bytes / (1024 * 1024)
    return f"{mib:.0f} MiB" if mib >= 1 else f"{max_upload_bytes} bytes"


@router.get(SUBMIT)
def submit_form(request: Request, key: DeveloperSignedIn, runtime: RuntimeDep) -> Response:
    context = {
        "title": "Submit a learnware",
        "errors": {},
        "limit": _limits(runtime.settings.max_upload_bytes),
    }
    return page(request, "submit.html", context)


@router.post(SUBMIT, dependencies=[CsrfChecked])
def submit(
    request: Request,
    key: DeveloperSignedIn,
    db: SessionDep,
    runtime: RuntimeDep,
    package: Annotated[UploadFile | None, File()] = None,
    spec: Annotated[UploadFile | None, File()] = None,
) -> Response:
    """The learnware service's submit: a bad package is refused with its reason, nothing stored."""
    settings = runtime.settings
    limit = _limits(settings.max_upload_bytes)
    if package is None or not package.filename:
        context = {
            "title": "Submit a learnware",
            "errors": {"package": "choose a package zip"},
            "limit": limit,
        }
        return page(request, "submit.html", context, status_code=422)
    field = "package"
    try:
        with (
            saved_upload(
                package,
                settings.scratch_dir,
                max_bytes=settings.max_upload_bytes,
                what="package",
                filename="package.zip",
            ) as zip_path,
            saved_upload(
                spec if spec is not None and spec.filename else None,
                settings.scratch_dir,
                max_bytes=settings.max_spec_upload_bytes,
                what="spec",
                filename="spec.safetensors",
            ) as spec_path,
        ):
            assert zip_path is not None
            learnware, _job = learnwares.submit(db, runtime, key, zip_path, spec_path)
    except DockError as exc:
        db.rollback()
        status, code = status_and_code(exc)
        message = str(exc)
        if isinstance(exc, IncompatibleSpec) and spec is not None and spec.filename:
            field = "spec"
        context = {"title": "Submit a learnware", "errors": {field: message}, "code": code, "limit": limit}
        return page(request, "submit.html", context, status_code=status)
    db.commit()
    location = f"/learnwares/{learnware.id}"
    if request.headers.get("HX-Request") == "true":
        return Response(status_code=200, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)
