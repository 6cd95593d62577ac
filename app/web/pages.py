"""Sign-in, browsing, a learnware's page (download, delete, transfer to another base), my learnwares."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from pydantic import ValidationError

from app.api.deps import RuntimeDep, SessionDep
from app.api.errors import status_and_code
from app.auth.service import authenticate
from app.db.models import ApiKey, LearnwareStatus, Role
from app.errors import NotFound
from app.learnwares import service as learnwares
from app.learnwares.browse import SORTS, BrowseQuery, browse, facets
from app.ml.errors import DockError
from app.reuse import service as reuse
from app.reuse.schemas import TransferCreate
from app.web.card import ExtrasCache, latest_ingest, lineage_links, spec_facts, usage
from app.web.errors import FieldError
from app.web.render import HERE, WebRoute, page, render_markdown
from app.web.session import CodecDep, CsrfChecked, SignedIn, WebSessionDep

router = APIRouter(route_class=WebRoute, include_in_schema=False)

STATIC = HERE / "static"
_ASSETS = {
    "htmx.min.js": "text/javascript",
    "web.js": "text/javascript",
    "web.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
IN_PROGRESS = (LearnwareStatus.pending, LearnwareStatus.validating, LearnwareStatus.fitting)
_extras = ExtrasCache()


@router.get("/assets/{name}")
def asset(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no asset {name}")
    return Response(
        (STATIC / name).read_bytes(),
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=3600"},
    )


def _safe_next(target: str | None) -> str | None:
    """Only a path on this site (no scheme, no host, no ``//``)."""
    if target and target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return None


def home_for(role: Role) -> str:
    return "/mine" if role == Role.developer else "/"


@router.get("/signin")
def signin_form(request: Request, session: WebSessionDep, next: str | None = None) -> Response:
    if session.key is not None:
        return RedirectResponse(_safe_next(next) or home_for(session.key.role), status_code=303)
    return page(request, "signin.html", {"next": _safe_next(next) or ""})


@router.post("/signin", dependencies=[CsrfChecked])
def signin(
    request: Request,
    db: SessionDep,
    codec: CodecDep,
    api_key: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    try:
        key = authenticate(db, api_key.strip())
    except DockError as exc:
        status, _ = status_and_code(exc)
        return page(
            request,
            "signin.html",
            {"next": _safe_next(next) or "", "errors": {"api_key": str(exc)}},
            status_code=status,
        )
    # A new nonce on sign-in: a session id planted before it is worth nothing after.
    request.state.web_session = codec.new(key.id)
    request.state.web_session.key = key
    return RedirectResponse(_safe_next(next) or home_for(key.role), status_code=303)


@router.post("/signout", dependencies=[CsrfChecked])
def signout(request: Request, codec: CodecDep) -> Response:
    request.state.web_session = codec.new()
    return RedirectResponse("/signin", status_code=303)


def _int_field(value: str, field: str, *, minimum: int = 0) -> int | None:
    value = value.strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        raise FieldError(f"{field.replace('_', ' ')} must be a whole number, not {value!r}", field) from None
    if number < minimum:
        raise FieldError(f"{field.replace('_', ' ')} must be at least {minimum}", field)
    return number


@router.get("/")
def browse_page(
    request: Request,
    key: SignedIn,
    db: SessionDep,
    runtime: RuntimeDep,
    q: Annotated[str, Query(max_length=200)] = "",
    task_type: str = "",
    model_format: str = "",
    base_model: str = "",
    space_id: str = "",
    n_classes: str = "",
    labels: Annotated[str, Query(max_length=500)] = "",
    license: str = "",
    owner: str = "",
    sort: str = "newest",
    page_number: Annotated[str, Query(alias="page")] = "1",
) -> Response:
    """Every ready learnware (and your own in any state), searched, filtered, sorted, in pages."""
    errors: dict[str, str] = {}
    values: dict[str, int | None] = {}
    for field, raw, minimum in (("n_classes", n_classes, 2), ("owner", owner, 1), ("page", page_number, 1)):
        try:
            values[field] = _int_field(raw, field, minimum=minimum)
        except FieldError as exc:
            errors[exc.field] = str(exc)
            values[field] = None
    if sort not in SORTS:
        errors["sort"] = f"sort by one of {', '.join(SORTS)}, not {sort!r}"
    query = BrowseQuery(
        q=q.strip(),
        task_type=task_type,
        model_format=model_format,
        base_model=base_model,
        space_id=space_id,
        n_classes=values["n_classes"],
        labels=tuple(n.strip() for n in labels.split(",") if n.strip()),
        license=license,
        owner_id=values["owner"],
        sort=sort if sort in SORTS else "newest",  # type: ignore[arg-type]
        page=values["page"] or 1,
        per_page=runtime.settings.web_page_size,
    )
    result = browse(db, key, query)
    params = {
        k: v
        for k, v in {
            "q": q,
            "task_type": task_type,
            "model_format": model_format,
            "base_model": base_model,
            "space_id": space_id,
            "n_classes": n_classes,
            "labels": labels,
            "license": license,
            "owner": owner,
            "sort": sort,
        }.items()
        if v
    }
    context = {
        "result": result,
        "facets": facets(db, key),
        "query": query,
        "params": params,
        "sorts": SORTS,
        "errors": errors,
        "title": "Browse learnwares",
    }
    template = "_results.html" if request.headers.get("HX-Target") == "results" else "browse.html"
    return page(request, template, context, status_code=422 if errors else 200)


def _learnware_context(
    request: Request, learnware_id: int, key: ApiKey, db: SessionDep, runtime: RuntimeDep
) -> dict[str, Any]:
    learnware = learnwares.get_visible(db, key, learnware_id)
    extras = _extras.get(runtime, learnware)
    owner = db.get(ApiKey, learnware.owner_id) if learnware.owner_id else None
    return {
        "lw": learnware,
        "owner_name": owner.name if owner else None,
        "is_owner": learnware.owner_id == key.id,
        "can_delete": learnware.owner_id == key.id or key.role == Role.admin,
        "extras": extras,
        "inputs_accuracy": _extras.accuracy(runtime, learnware, extras),
        "readme_html": render_markdown(extras.readme) if extras.readme else None,
        "spec": spec_facts(db, learnware),
        "lineage": lineage_links(db, key, learnware),
        "job": latest_ingest(db, learnware.id),
        "in_progress": learnware.status in IN_PROGRESS,
        "usage": usage(learnware, str(request.base_url).rstrip("/")),
        "manifest": learnware.manifest,
        "transfer": transfer_choices(learnware.base_model) if learnware.model_format == "peft-lora" else None,
        "transfer_form": {"method": "bico", "private": True},
        "transfer_errors": {},
        "title": learnware.name,
    }


@router.get("/learnwares/{learnware_id}")
def learnware_page(
    request: Request, learnware_id: int, key: SignedIn, db: SessionDep, runtime: RuntimeDep
) -> Response:
    return page(request, "learnware.html", _learnware_context(request, learnware_id, key, db, runtime))


def transfer_choices(learnware_base: str | None) -> dict[str, Any]:
    """The bases a LoRA learnware can move to and every transfer method (each yields a learnware)."""
    from app.ml.bases import registered_bases
    from app.ml.transfer import METHODS

    return {
        "bases": [b for b in registered_bases() if b != learnware_base],
        "methods": [(m.name, m.summary) for m in METHODS.values()],
    }


def _transfer_field(message: str, method: str) -> str:
    """The form field a transfer refusal is about (the service names it in words)."""
    if "transfer method" in message or message.startswith(f"{method} "):
        return "method"
    if "base" in message or "already on" in message:
        return "target_base"
    return "texts" if "text" in message else "transfer"


@router.post("/learnwares/{learnware_id}/transfer", dependencies=[CsrfChecked])
def transfer(
    request: Request,
    learnware_id: int,
    key: SignedIn,
    db: SessionDep,
    runtime: RuntimeDep,
    target_base: Annotated[str, Form(max_length=256)] = "",
    method: Annotated[str, Form(max_length=64)] = "bico",
    texts: Annotated[str, Form(max_length=2_000_000)] = "",
    private: Annotated[str, Form()] = "",
) -> Response:
    """Move a LoRA learnware onto another base (the reuse service's transfer), then follow it."""
    lines = [t.strip() for t in texts.splitlines() if t.strip()]
    try:
        if len(lines) < 2:
            raise FieldError(f"give at least two calibration texts, one a line (got {len(lines)})", "texts")
        try:
            body = TransferCreate(
                learnware_id=learnware_id,
                target_base=target_base,
                method=method,
                texts=lines,
                # Unticked: the reuse service's default (published for a developer or admin; a
                # user key's results are always private, and publishing one is refused).
                private=True if private else None,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = str(first["loc"][0]) if first.get("loc") else "texts"
            raise FieldError(f"{where.replace('_', ' ')}: {first['msg']}", where) from None
        job = reuse.create_transfer(db, runtime, key, body)
    except DockError as exc:
        db.rollback()
        message = str(exc)
        field = exc.field if isinstance(exc, FieldError) else _transfer_field(message, method)
        context = _learnware_context(request, learnware_id, key, db, runtime)
        context["transfer_form"] = {
            "target_base": target_base,
            "method": method,
            "texts": texts,
            "private": bool(private),
        }
        context["transfer_errors"] = {field: message}
        return page(request, "learnware.html", context, status_code=status_and_code(exc)[0])
    db.commit()
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


@router.get("/learnwares/{learnware_id}/status")
def learnware_status(request: Request, learnware_id: int, key: SignedIn, db: SessionDep) -> Response:
    """The status panel, polled while the learnware is validated, fitted and indexed."""
    learnware = learnwares.get_visible(db, key, learnware_id)
    context = {
        "lw": learnware,
        "job": latest_ingest(db, learnware.id),
        "in_progress": learnware.status in IN_PROGRESS,
    }
    response = page(request, "_lw_status.html", context)
    if not context["in_progress"] and request.headers.get("HX-Request") == "true":
        # The card's other parts (spec, counters) changed with the status: reload them once.
        response.headers["HX-Refresh"] = "true"
    return response


@router.get("/learnwares/{learnware_id}/download")
def download(learnware_id: int, key: SignedIn, db: SessionDep, runtime: RuntimeDep) -> Response:
    learnware, stream = learnwares.open_package(db, runtime, key, learnware_id)
    db.commit()  # the count, before the body streams (the session closes with the request)

    def chunks() -> Iterator[bytes]:
        try:
            while chunk := stream.read(1 << 20):
                yield chunk
        finally:
            stream.close()

    return StreamingResponse(
        chunks(),
        media_type="application/zip",
        headers={
            "Content-Disposition": f'attachment; filename="learnware-{learnware.id}.zip"',
            "Content-Length": str(learnware.package_size),
            "X-Content-SHA256": learnware.package_sha256,
        },
    )


@router.get("/mine")
def mine(request: Request, key: SignedIn, db: SessionDep) -> Response:
    """My learnwares in every state: uploads for developers, fine-tunes and merges for users."""
    result = browse(db, key, BrowseQuery(mine=True, per_page=200))
    in_progress = any(lw.status in IN_PROGRESS for lw in result.items)
    context = {"result": result, "in_progress": in_progress, "title": "My learnwares"}
    template = "_mine_table.html" if request.headers.get("HX-Target") == "mine" else "mine.html"
    return page(request, template, context)


@router.post("/learnwares/{learnware_id}/delete", dependencies=[CsrfChecked])
def delete(learnware_id: int, key: SignedIn, db: SessionDep, runtime: RuntimeDep) -> Response:
    learnwares.delete(db, runtime, key, learnware_id)
    return RedirectResponse("/mine", status_code=303)
