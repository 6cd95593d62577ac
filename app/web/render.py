"""Rendering pages: the Jinja2 environment, one ``page`` helper, and the route class that turns
the dock's errors into pages (the same message the API would send, as HTML).

Every response of the web router goes through ``WebRoute``: it sets the session cookie when the
session is new or changed, adds the security headers (a CSP that allows only this origin's
scripts and styles, no framing, no caching of pages that show a user's data), sends a visitor
who must sign in to the sign-in form, and renders any ``DockError`` or request validation error
as an error page with its status.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from markdown_it import MarkdownIt
from starlette.requests import Request
from starlette.responses import Response

from app.api.errors import status_and_code
from app.db.models import ApiKey, Role
from app.ml.errors import DockError
from app.web.session import CSRF_FIELD, CSRF_HEADER, SignInRequired, WebSession, get_codec

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

# A package's README, rendered without its raw HTML (escaped) and with markdown-it's link check
# (no javascript:, vbscript:, file: or data: links other than images).
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")


def render_markdown(text: str) -> str:
    return _markdown.render(text)


def nav_for(role: Role | None) -> list[tuple[str, str]]:
    """The navigation a role gets: (path, label)."""
    if role is None:
        return []
    items = [("/", "Browse"), ("/find", "Find a model")]
    if role in (Role.developer, Role.admin):
        items.append(("/submit", "Submit"))
    items.append(("/mine", "My learnwares"))
    if role == Role.admin:
        items.append(("/admin", "Admin"))
    return items


def page(
    request: Request, template: str, context: dict[str, Any] | None = None, *, status_code: int = 200
) -> HTMLResponse:
    """A template rendered with what every page needs: the key, its navigation, the CSRF token."""
    session: WebSession | None = getattr(request.state, "web_session", None)
    key = session.key if session else None
    csrf = get_codec(request).csrf(session) if session else ""
    base = {
        "request": request,
        "key": key,
        "nav": nav_for(key.role if key else None),
        "path": request.url.path,
        "csrf": csrf,
        "csrf_field": CSRF_FIELD,
        "csrf_header": CSRF_HEADER,
        "htmx": request.headers.get("HX-Request") == "true",
    }
    response = templates.TemplateResponse(
        request, template, {**base, **(context or {})}, status_code=status_code
    )
    return response


def _finish(request: Request, response: Response) -> Response:
    session: WebSession | None = getattr(request.state, "web_session", None)
    if session is not None and session.fresh:
        get_codec(request).set_cookie(response, session)
    for name, value in PAGE_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _sign_in_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = f"/signin?next={quote(target, safe='')}"
    if request.headers.get("HX-Request") == "true":
        return Response(status_code=200, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


def _validation_message(exc: RequestValidationError) -> str:
    errors = exc.errors()
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path"))
    message = str(first.get("msg", "invalid request"))
    return f"{where}: {message}" if where else message


def error_page(request: Request, status: int, code: str, message: str) -> HTMLResponse:
    return page(
        request, "error.html", {"status": status, "code": code, "message": message}, status_code=status
    )


class WebRoute(APIRoute):
    """An ``APIRoute`` whose errors are pages and whose responses carry the session cookie."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                response = await handler(request)
            except SignInRequired:
                response = _sign_in_redirect(request)
            except DockError as exc:
                status, code = status_and_code(exc)
                response = error_page(request, status, code, str(exc))
            except RequestValidationError as exc:
                response = error_page(request, 422, "validation_error", _validation_message(exc))
            return _finish(request, response)

        return route


def refuse_signed_in_non_admin(request: Request, key: ApiKey | None) -> HTMLResponse | None:
    """The admin page for a browser signed in with another role's key: a 403 page, not the
    dashboard."""
    if key is None or key.role == Role.admin:
        return None
    message = (
        f"the admin page needs an admin key; you are signed in with {key.prefix}, a {key.role.value} key"
    )
    return _finish(request, error_page(request, 403, "forbidden", message))  # type: ignore[return-value]
