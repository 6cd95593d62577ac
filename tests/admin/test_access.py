"""Only admins use the admin routes: every route under /v1/admin and /admin, listed from the
app itself (a route added later is covered too), refuses user and developer keys with 403, by
either header (tests/admin/test_session.py: the same by the browser's session cookie)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from app.admin.endpoints import pages
from app.auth.service import create_key
from app.db.models import Role
from app.main import create_app
from app.runtime import Runtime
from app.settings import Settings
from tests.fixtures.service import Keys, empty_tables


def admin_routes() -> list[tuple[str, str]]:
    """Every operation under /v1/admin in the app's OpenAPI document, and the page's routes."""
    schema = create_app(Settings(environment="testing")).openapi()
    found = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        if path.startswith("/v1/admin/")
        for method in operations
    }
    found |= {
        (method, route.path)
        for route in pages.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }
    return sorted(found - {("HEAD", path) for _, path in found})


ADMIN_ROUTES = admin_routes()
PAGES = [(m, p) for m, p in ADMIN_ROUTES if p.startswith("/admin")]
API = [(m, p) for m, p in ADMIN_ROUTES if p.startswith("/v1/admin/")]


def concrete(path: str) -> str:
    """A path with its parameters filled: ids that exist or not, it must not matter."""
    path = path.replace("{name}", "admin.js")
    return re.sub(r"\{[^}]+\}", "1", path)


def test_the_dashboards_routes_are_all_listed() -> None:
    assert ("GET", "/admin") in PAGES
    for expected in (
        ("GET", "/v1/admin/overview"),
        ("GET", "/v1/admin/charts"),
        ("GET", "/v1/admin/jobs"),
        ("POST", "/v1/admin/jobs/{job_id}/retry"),
        ("POST", "/v1/admin/learnwares/{learnware_id}/approve"),
        ("POST", "/v1/admin/learnwares/{learnware_id}/reject"),
        ("POST", "/v1/admin/spec-spaces/{space_id}/rebuild"),
    ):
        assert expected in API


@pytest.fixture(scope="module")
def refusing_client(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One app for the many refusals below (starting an app per request is most of their time)."""
    settings = Settings(
        environment="testing", data_dir=tmp_path_factory.mktemp("access") / "var", database_url=database_url
    )
    runtime = Runtime.create(settings, persist_index=False)
    try:
        with TestClient(create_app(runtime=runtime)) as client:
            yield client
    finally:
        empty_tables(runtime)
        runtime.db.dispose()


NON_ADMIN = (Role.user, Role.developer)


@pytest.fixture
def non_admin_tokens(refusing_client: TestClient) -> list[str]:
    """A fresh key of each non-admin role (other tests empty the database between tests)."""
    runtime: Runtime = refusing_client.app.state.runtime  # type: ignore[attr-defined]
    with runtime.db.session() as session:
        return [create_key(session, role=role, name=role.value).token for role in NON_ADMIN]


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_non_admins_get_403(
    method: str, path: str, refusing_client: TestClient, non_admin_tokens: list[str]
) -> None:
    for token in non_admin_tokens:
        for headers in ({"Authorization": f"Bearer {token}"}, {"X-API-Key": token}):
            response = refusing_client.request(method, concrete(path), headers=headers, json={})
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize(("method", "path"), API)
def test_no_key_gets_401(method: str, path: str, refusing_client: TestClient) -> None:
    response = refusing_client.request(method, concrete(path), json={})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(("method", "path"), API)
def test_an_admin_gets_past_the_check(method: str, path: str, client: TestClient, keys: Keys) -> None:
    response = client.request(method, concrete(path), headers=keys.auth("admin"), json={})
    assert response.status_code not in (401, 403), response.text


def test_the_page_sends_a_visitor_without_a_session_to_sign_in(client: TestClient, keys: Keys) -> None:
    for headers in ({}, keys.auth("admin")):  # a header key is no browser session
        response = client.get("/admin", headers=headers, follow_redirects=False)
        assert response.status_code == 303, response.text
        assert response.headers["location"] == "/signin?next=%2Fadmin"
        assert response.headers["cache-control"] == "no-store"


def test_assets_are_served_and_nothing_else(client: TestClient) -> None:
    script = client.get("/admin/static/admin.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert client.get("/admin/static/admin.css").headers["content-type"].startswith("text/css")
    for name in ("admin.html", "..%2Fendpoints.py", "missing.js"):
        assert client.get(f"/admin/static/{name}").status_code == 404
