"""The dashboard on the web session: the page signs in through /signin and back, its API calls
are authenticated by the session cookie (no key in the page), an action without the session's
CSRF token is refused, other roles and visitors get no admin data, and API clients with a key
in a header are served exactly as before (the header wins over the cookie)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.auth.service import revoke_key
from app.db.models import ApiKey, Job, JobState
from app.main import create_app
from app.runtime import Runtime
from app.web.session import COOKIE, CSRF_HEADER
from tests.admin.conftest import failed_job, key_prefix, learnware_awaiting_review, running_job
from tests.admin.test_access import API, concrete
from tests.web.conftest import Keys, csrf_of, sign_in

_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def dashboard_csrf(client: TestClient) -> str:
    page = client.get("/admin")
    assert page.status_code == 200, page.text
    match = _META.search(page.text)
    assert match, "no CSRF token in the dashboard"
    return match.group(1)


def job_state(runtime: Runtime, job_id: int) -> JobState:
    with runtime.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.state


def test_a_visitor_signs_in_and_comes_back_to_the_dashboard(client: TestClient, keys: Keys) -> None:
    first = client.get("/admin", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/signin?next=%2Fadmin"
    form = client.get(first.headers["location"])
    assert 'name="next" value="/admin"' in form.text
    signed_in = client.post(
        "/signin",
        data={"api_key": keys.admin, "csrf_token": csrf_of(form.text), "next": "/admin"},
        follow_redirects=False,
    )
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/admin"
    page = client.get("/admin")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["cache-control"] == "no-store"
    # Who is signed in, the session's token (for the script and the sign-out form), no key.
    assert f"admin · {key_prefix(keys.admin)}" in page.text
    token = dashboard_csrf(client)
    assert f'name="csrf_token" value="{token}"' in page.text and 'action="/signout"' in page.text
    assert keys.admin not in page.text and 'type="password"' not in page.text
    script = client.get("/admin/static/admin.js").text
    assert "sessionStorage" not in script and "localStorage" not in script and "X-API-Key" not in script
    assert 'credentials: "same-origin"' in script and '"X-CSRF-Token"' in script


def test_the_dashboards_calls_work_by_the_session_cookie(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    sign_in(client, keys.admin)
    token = dashboard_csrf(client)
    failed = failed_job(runtime, worker="cpu@host-c", reason="disk full")
    running = running_job(runtime, worker="gpu@host-a", progress=0.5, message="half way")
    waiting = learnware_awaiting_review(runtime, space, key_prefix(keys.developer), "waits")
    # Every read admin.js makes, with no key: the cookie is the key.
    me = client.get("/v1/keys/me").json()
    assert (me["name"], me["role"]) == ("admin", "admin")
    assert client.get("/v1/admin/overview").json()["job_counts"]["failed"] == 1
    assert client.get("/v1/admin/charts?minutes=5").status_code == 200
    listed = client.get("/v1/admin/jobs?state=failed").json()
    assert [j["id"] for j in listed["items"]] == [failed]
    review = client.get("/v1/learnwares?status=awaiting_review&limit=50").json()
    assert [lw["id"] for lw in review["items"]] == [waiting]
    # And each action, with the session's token.
    csrf = {CSRF_HEADER: token}
    retried = client.post(f"/v1/admin/jobs/{failed}/retry", headers=csrf)
    assert retried.status_code == 200 and retried.json()["state"] == "queued"
    assert client.post(f"/v1/jobs/{running}/cancel", headers=csrf).status_code == 200
    assert job_state(runtime, running) == JobState.cancelled
    approved = client.post(f"/v1/admin/learnwares/{waiting}/approve", headers=csrf)
    assert approved.status_code == 200 and approved.json()["status"] == "ready"
    rebuild = client.post(f"/v1/admin/spec-spaces/{space[0]}/rebuild", headers=csrf)
    assert rebuild.status_code == 202, rebuild.text
    with runtime.db.session() as session:
        key = session.query(ApiKey).filter_by(name="admin").one()
        assert key.last_used_at is not None  # a session's use counts as the key's


def test_an_action_without_the_sessions_token_is_refused(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    sign_in(client, keys.admin)
    failed = failed_job(runtime, worker="cpu@host-c", reason="disk full")
    # Another browser's session has a token of its own: it is no good here.
    with TestClient(create_app(runtime=runtime)) as other:
        sign_in(other, keys.admin)
        foreign = dashboard_csrf(other)
    assert foreign != dashboard_csrf(client)
    for headers in ({}, {CSRF_HEADER: ""}, {CSRF_HEADER: "forged"}, {CSRF_HEADER: foreign}):
        response = client.post(f"/v1/admin/jobs/{failed}/retry", headers=headers)
        assert response.status_code == 403, (headers, response.text)
        error = response.json()["error"]
        assert error["code"] == "forbidden" and CSRF_HEADER in error["message"]
    assert job_state(runtime, failed) == JobState.failed  # nothing done
    # The form field the pages use is no substitute for the header on the JSON API.
    refused = client.post(f"/v1/admin/jobs/{failed}/retry", data={"csrf_token": dashboard_csrf(client)})
    assert refused.status_code == 403


def test_a_request_another_site_makes_is_refused(client: TestClient, keys: Keys) -> None:
    sign_in(client, keys.admin)
    for site in ("cross-site", "same-site"):
        response = client.get("/v1/admin/overview", headers={"Sec-Fetch-Site": site})
        assert response.status_code == 403 and site in response.json()["error"]["message"]
    for site in ("same-origin", "none"):  # the dashboard's own fetches; an address typed in
        assert client.get("/v1/admin/overview", headers={"Sec-Fetch-Site": site}).status_code == 200


@pytest.mark.parametrize("who", ["user", "developer"])
def test_a_signed_in_non_admin_gets_no_admin_data(client: TestClient, keys: Keys, who: str) -> None:
    sign_in(client, getattr(keys, who))
    page = client.get("/admin")
    assert page.status_code == 403 and "needs an admin key" in page.text and 'id="dashboard"' not in page.text
    token = csrf_of(client.get("/").text)
    for method, path in API:
        response = client.request(method, concrete(path), headers={CSRF_HEADER: token}, json={})
        assert response.status_code == 403, (method, path, response.text)
        assert response.json()["error"]["code"] == "forbidden"


def test_no_visitor_without_a_signed_in_session_gets_admin_data(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    def refused() -> None:
        for method, path in API:
            response = client.request(method, concrete(path), json={})
            assert response.status_code == 401, (method, path, response.text)
        assert client.get("/admin", follow_redirects=False).status_code == 303

    client.get("/signin")  # a visitor's session, signed in with no key
    assert COOKIE in client.cookies
    refused()
    client.cookies.set(COOKIE, "e30.forged")  # not signed by the dock
    refused()
    csrf = sign_in(client, keys.admin)
    assert client.get("/v1/admin/overview").status_code == 200
    client.post("/signout", data={"csrf_token": csrf})  # signed out
    refused()
    sign_in(client, keys.admin)
    with runtime.db.session() as session:
        revoke_key(session, session.query(ApiKey).filter_by(name="admin").one().id)
    refused()  # a revoked key ends its sessions on the API too


def test_a_key_in_a_header_wins_over_the_cookie(client: TestClient, keys: Keys, runtime: Runtime) -> None:
    failed = failed_job(runtime, worker="cpu@host-c", reason="disk full")
    sign_in(client, keys.user)
    # An API client's key: served as before, no CSRF token asked (no cookie decides anything).
    assert client.get("/v1/admin/overview", headers=keys.auth("admin")).status_code == 200
    retried = client.post(f"/v1/admin/jobs/{failed}/retry", headers={"X-API-Key": keys.admin})
    assert retried.status_code == 200
    sign_in(client, keys.admin)
    assert client.get("/v1/keys/me", headers=keys.auth("user")).json()["role"] == "user"
    assert client.get("/v1/admin/overview", headers=keys.auth("user")).status_code == 403
    bad = client.get("/v1/admin/overview", headers={"X-API-Key": "pdk_bad_key"})
    assert bad.status_code == 401 and bad.json()["error"]["message"] == "invalid API key"
