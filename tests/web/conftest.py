"""Web page tests on the API's real migrated databases (SQLite, and PostgreSQL when
PAVEDOCK_TEST_POSTGRES_URL is set): the real app through a test client, as a browser without
scripts sees it (cookies kept, forms posted with their CSRF token)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.fixtures.service import Keys

__all__ = ["Keys"]

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; returns the CSRF token of the signed-in session."""
    form = client.get("/signin")
    assert form.status_code == 200
    response = client.post(
        "/signin", data={"api_key": token, "csrf_token": csrf_of(form.text)}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    page = client.get(response.headers["location"])
    assert page.status_code == 200, page.text
    return csrf_of(page.text)


@pytest.fixture
def web(client: TestClient) -> TestClient:
    """The app's client with no API key header (the pages use the session cookie)."""
    return client
