"""Browser sessions: a signed, httpOnly, SameSite=Strict cookie instead of the API key, and a
CSRF token on every form.

The cookie holds ``{nonce, key id, expiry}`` and an HMAC-SHA256 of it; the API key itself never
reaches the browser after sign-in (it is checked once, as the API checks it). Every request
looks the key up again, so a revoked or expired key ends its sessions at once. Visitors who have
not signed in get a session too (no key), so the sign-in form has a CSRF token; signing in makes
a new nonce (no session fixation).

The CSRF token is an HMAC of the session's nonce: a page gets it in its forms (and htmx sends it
as ``X-CSRF-Token``); a POST without the token of the cookie it came with is refused. SameSite=
Strict already keeps other sites' requests from carrying the cookie; the token is the second lock.

The same cookie signs a browser in to the JSON API (``api_session_key``, which the app factory
hands to ``app.auth``): the admin dashboard's scripts call ``/v1/…`` with it, never with a key.
There too, a request that changes something must send the session's token as ``X-CSRF-Token``,
and a browser that says the request comes from another origin (``Sec-Fetch-Site``) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from app.api.deps import SessionDep
from app.auth.dependencies import SESSION_COOKIE
from app.db.base import utcnow
from app.db.models import ApiKey, Role
from app.errors import Forbidden
from app.runtime import Runtime

log = logging.getLogger(__name__)

COOKIE = SESSION_COOKIE
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
SECRET_FILE = "web-session.key"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# ``Sec-Fetch-Site`` values of requests a page of this origin makes, or the user types.
_OWN_SITE = frozenset({"same-origin", "none"})


class SignInRequired(Exception):
    """The page needs a signed-in key; the visitor is sent to the sign-in form."""


class CsrfRefused(Forbidden):
    """A form without the CSRF token of the session it came with."""


@dataclass
class WebSession:
    nonce: str
    expires: int
    key_id: int | None = None
    key: ApiKey | None = None
    fresh: bool = False
    """Set-Cookie on the response (a new or changed session)."""


@dataclass
class SessionCodec:
    """Signs and reads session cookies and derives CSRF tokens, with one secret."""

    secret: bytes
    lifetime_s: int
    secure: bool

    def _mac(self, purpose: str, data: bytes) -> bytes:
        return hmac.new(self.secret, purpose.encode() + b"\0" + data, hashlib.sha256).digest()

    def new(self, key_id: int | None = None) -> WebSession:
        expires = int(time.time()) + self.lifetime_s
        return WebSession(nonce=secrets.token_urlsafe(16), expires=expires, key_id=key_id, fresh=True)

    def encode(self, session: WebSession) -> str:
        payload = json.dumps({"n": session.nonce, "k": session.key_id, "e": session.expires}).encode()
        mac = self._mac("session", payload)
        return f"{_b64(payload)}.{_b64(mac)}"

    def decode(self, raw: str | None) -> WebSession | None:
        """The session in a cookie, or None if it is absent, forged, malformed or expired."""
        if not raw or raw.count(".") != 1:
            return None
        body, mac = raw.split(".")
        try:
            payload, given = _unb64(body), _unb64(mac)
        except ValueError:
            return None
        if not hmac.compare_digest(given, self._mac("session", payload)):
            return None
        try:
            data = json.loads(payload)
            nonce, key_id, expires = str(data["n"]), data["k"], int(data["e"])
        except (ValueError, KeyError, TypeError):
            return None
        if expires <= time.time() or (key_id is not None and not isinstance(key_id, int)):
            return None
        return WebSession(nonce=nonce, expires=expires, key_id=key_id)

    def csrf(self, session: WebSession) -> str:
        return _b64(self._mac("csrf", session.nonce.encode()))

    def set_cookie(self, response: Response, session: WebSession) -> None:
        response.set_cookie(
            COOKIE,
            self.encode(session),
            max_age=max(0, session.expires - int(time.time())),
            path="/",
            httponly=True,
            secure=self.secure,
            samesite="strict",
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64") from exc


def _file_secret(path: Path) -> bytes:
    """The secret kept in ``path``, made on first use; written by link so that two processes
    starting at once agree on one secret."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(32))
        try:
            os.link(temp, path)
        except FileExistsError:
            pass
        finally:
            temp.unlink()
    secret = path.read_bytes()
    if len(secret) < 32:
        raise RuntimeError(f"{path} holds under 32 bytes: remove it, or set PAVEDOCK_WEB_SESSION_SECRET")
    return secret


def make_codec(runtime: Runtime) -> SessionCodec:
    settings = runtime.settings
    if settings.web_session_secret is not None:
        secret = settings.web_session_secret.get_secret_value().encode()
        if len(secret) < 32:
            raise ValueError("PAVEDOCK_WEB_SESSION_SECRET must have at least 32 characters")
    else:
        if settings.environment == "production":
            log.warning("PAVEDOCK_WEB_SESSION_SECRET is unset: web sessions are signed with a file secret")
        secret = _file_secret(settings.data_dir / SECRET_FILE)
    secure = (
        settings.web_cookie_secure
        if settings.web_cookie_secure is not None
        else settings.environment == "production"
    )
    return SessionCodec(secret=secret, lifetime_s=int(settings.web_session_hours * 3600), secure=secure)


def get_codec(request: Request) -> SessionCodec:
    """The app's codec, made on first use (the runtime exists only once the app has started)."""
    codec: SessionCodec | None = getattr(request.app.state, "web_codec", None)
    if codec is None:
        codec = make_codec(request.app.state.runtime)
        request.app.state.web_codec = codec
    return codec


CodecDep = Annotated[SessionCodec, Depends(get_codec)]


def live_key(db: Session, key_id: int) -> ApiKey | None:
    """The key of a session, if it still may act (not revoked, not expired)."""
    key = db.get(ApiKey, key_id)
    if key is None or key.revoked_at is not None:
        return None
    if key.expires_at is not None and key.expires_at <= utcnow():
        return None
    return key


def web_session(request: Request, db: SessionDep, codec: CodecDep) -> WebSession:
    """This request's session: the cookie's if it is valid and its key still may act, else a
    fresh anonymous one (set on the response)."""
    session = codec.decode(request.cookies.get(COOKIE))
    if session is not None and session.key_id is not None:
        session.key = live_key(db, session.key_id)
        if session.key is None:
            session = None
    if session is None:
        session = codec.new()
    request.state.web_session = session
    return session


WebSessionDep = Annotated[WebSession, Depends(web_session)]


def signed_in(session: WebSessionDep) -> ApiKey:
    if session.key is None:
        raise SignInRequired
    return session.key


SignedIn = Annotated[ApiKey, Depends(signed_in)]


def developer(key: SignedIn) -> ApiKey:
    if key.role not in (Role.developer, Role.admin):
        raise Forbidden(
            f"submitting learnwares needs a developer key; {key.prefix} is a {key.role.value} key"
        )
    return key


DeveloperSignedIn = Annotated[ApiKey, Depends(developer)]


async def csrf_checked(request: Request, session: WebSessionDep, codec: CodecDep) -> None:
    """Refuse a POST that lacks this session's CSRF token (form field or htmx header)."""
    given = request.headers.get(CSRF_HEADER)
    if given is None:
        form = await request.form()
        value = form.get(CSRF_FIELD)
        given = value if isinstance(value, str) else None
    if not given or not hmac.compare_digest(given, codec.csrf(session)):
        raise CsrfRefused(
            "this form's security token is missing or out of date: reload the page and try again"
        )


CsrfChecked = Depends(csrf_checked)


def cookie_key(request: Request, db: SessionDep) -> ApiKey | None:
    """The key a request's session cookie is signed in with, if any (for pages outside this
    router, such as the admin dashboard, that must refuse a signed-in key of another role)."""
    session = get_codec(request).decode(request.cookies.get(COOKIE))
    if session is None or session.key_id is None:
        return None
    session.key = live_key(db, session.key_id)
    if session.key is not None:
        request.state.web_session = session
    return session.key


def api_session_key(request: Request, db: Session, cookie: str) -> ApiKey | None:
    """The key an API request is signed in with by its session cookie (``app.auth``'s
    ``SessionKeyResolver``), or None without a signed-in session. A request another origin
    makes, or an unsafe one without the session's ``X-CSRF-Token``, is refused (403)."""
    codec = get_codec(request)
    session = codec.decode(cookie)
    if session is None or session.key_id is None:
        return None
    key = live_key(db, session.key_id)
    if key is None:
        return None
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in _OWN_SITE:
        raise CsrfRefused(
            f"a request from another site ({site}) may not use this browser's session: send an API key"
        )
    if request.method not in SAFE_METHODS:
        given = request.headers.get(CSRF_HEADER)
        if not given or not hmac.compare_digest(given, codec.csrf(session)):
            raise CsrfRefused(
                f"a request signed in by the browser session must send the session's {CSRF_HEADER} "
                "header (missing or out of date): reload the page and try again"
            )
    return key
