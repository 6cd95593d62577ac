"""Sign-in with an API key into a signed, httpOnly, SameSite=Strict session cookie; CSRF tokens
on every form; sign-out; a revoked key ends its sessions; the admin page refuses other roles."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from app.auth.service import revoke_key
from app.db.models import ApiKey
from app.runtime import Runtime
from app.web.session import COOKIE, SessionCodec
from tests.web.conftest import Keys, csrf_of, sign_in


def test_codec_refuses_forged_and_expired_cookies() -> None:
    codec = SessionCodec(secret=b"s" * 32, lifetime_s=60, secure=False)
    session = codec.new(key_id=7)
    raw = codec.encode(session)
    back = codec.decode(raw)
    assert back is not None and (back.key_id, back.nonce) == (7, session.nonce)
    _body, mac = raw.split(".")
    forged = codec.encode(codec.new(key_id=8)).split(".")[0] + "." + mac
    assert codec.decode(forged) is None
    assert SessionCodec(secret=b"t" * 32, lifetime_s=60, secure=False).decode(raw) is None
    assert codec.decode("garbage") is None and codec.decode(None) is None
    session.expires = int(time.time()) - 1
    assert codec.decode(codec.encode(session)) is None
    assert codec.csrf(session) != codec.csrf(codec.new(key_id=7))


def test_pages_send_visitors_to_sign_in(client: TestClient) -> None:
    response = client.get("/find", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/signin?next=%2Ffind"
    htmx = client.get("/mine", headers={"HX-Request": "true"}, follow_redirects=False)
    assert htmx.headers["HX-Redirect"] == "/signin?next=%2Fmine"


def test_sign_in_sets_a_strict_httponly_cookie_and_goes_where_asked(client: TestClient, keys: Keys) -> None:
    form = client.get("/signin")
    cookie = form.headers["set-cookie"]
    assert (
        f"{COOKIE}=" in cookie
        and "HttpOnly" in cookie
        and "SameSite=strict" in cookie.replace("Strict", "strict")
    )
    assert "Content-Security-Policy" in form.headers and form.headers["X-Frame-Options"] == "DENY"
    response = client.post(
        "/signin",
        data={"api_key": keys.user, "csrf_token": csrf_of(form.text), "next": "/find"},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/find"
    assert keys.user not in response.headers["set-cookie"]  # the key never goes back to the browser
    page = client.get("/find")
    assert "user" in page.text and 'id="whoami"' in page.text


def test_sign_in_refuses_a_bad_key_beside_the_field_and_an_offsite_next(
    client: TestClient, keys: Keys
) -> None:
    form = client.get("/signin")
    bad = client.post("/signin", data={"api_key": "pdk_nope_nope", "csrf_token": csrf_of(form.text)})
    assert bad.status_code == 401
    assert (
        'id="api_key-error"' in bad.text
        and "invalid API key" in bad.text
        and 'aria-invalid="true"' in bad.text
    )
    response = client.post(
        "/signin",
        data={"api_key": keys.user, "csrf_token": csrf_of(bad.text), "next": "//evil.example/"},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/"


def test_forms_without_the_sessions_csrf_token_are_refused(client: TestClient, keys: Keys) -> None:
    anonymous = client.post("/signin", data={"api_key": keys.user})
    assert anonymous.status_code == 403 and "security token" in anonymous.text
    csrf = sign_in(client, keys.developer)
    assert client.post("/signout", data={"csrf_token": "x" * 43}).status_code == 403
    other = TestClient(client.app)
    other_csrf = csrf_of(other.get("/signin").text)
    assert client.post("/signout", data={"csrf_token": other_csrf}).status_code == 403  # another session's
    assert client.get("/mine").status_code == 200  # still signed in
    out = client.post("/signout", headers={"X-CSRF-Token": csrf}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/signin"
    assert client.get("/mine", follow_redirects=False).status_code == 303


def test_signing_in_makes_a_new_session(client: TestClient, keys: Keys) -> None:
    before = csrf_of(client.get("/signin").text)
    after = sign_in(client, keys.user)
    assert before != after  # a planted pre-sign-in session is worth nothing after


def test_a_revoked_key_ends_its_sessions(client: TestClient, keys: Keys, runtime: Runtime) -> None:
    sign_in(client, keys.user)
    assert client.get("/mine").status_code == 200
    with runtime.db.session() as session:
        key = session.query(ApiKey).filter_by(name="user").one()
        revoke_key(session, key.id)
    assert client.get("/mine", follow_redirects=False).status_code == 303


def test_navigation_by_role_and_the_admin_page(client: TestClient, keys: Keys) -> None:
    sign_in(client, keys.user)
    page = client.get("/").text
    assert 'data-nav="/find"' in page and 'data-nav="/submit"' not in page and 'data-nav="/admin"' not in page
    admin = client.get("/admin")
    assert admin.status_code == 403 and "needs an admin key" in admin.text and "dashboard" not in admin.text
    assert client.get("/submit").status_code == 403  # developers' page
    sign_in(client, keys.developer)
    assert 'data-nav="/submit"' in client.get("/mine").text
    assert client.get("/admin").status_code == 403
    sign_in(client, keys.admin)
    assert 'data-nav="/admin"' in client.get("/").text
    assert client.get("/admin").status_code == 200


def _web_routes() -> list[tuple[str, set[str], object]]:
    """(path, methods, route) of every page route (routers nest: walk them all)."""
    from fastapi.routing import APIRoute

    from app.web import developer, find, pages

    return [
        (route.path, set(route.methods), route)
        for part in (pages.router, find.router, developer.router)
        for route in part.routes
        if isinstance(route, APIRoute)
    ]


def test_every_form_the_pages_accept_checks_the_csrf_token(client: TestClient, keys: Keys) -> None:
    from fastapi.routing import APIRoute

    from app.web.session import csrf_checked

    posts = [(path, route) for path, methods, route in _web_routes() if methods - {"GET", "HEAD"}]
    assert len(posts) >= 8  # sign-in, sign-out, find, find by spec, reuse, submit, transfer, delete
    for path, route in posts:
        assert isinstance(route, APIRoute)
        calls = [d.call for d in route.dependant.dependencies]
        assert csrf_checked in calls, f"POST {path} has no CSRF check"
    # And in fact: an admin (who may do everything) is refused each one without the token.
    sign_in(client, keys.admin)
    for path, _route in posts:
        url = path.replace("{learnware_id}", "1").replace("{task_id}", "1")
        response = client.post(url, data={"csrf_token": "forged"}, follow_redirects=False)
        assert response.status_code == 403 and "security token" in response.text, url
