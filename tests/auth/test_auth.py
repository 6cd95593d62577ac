"""API keys: hashed, with roles, expiry and revocation; admin routes are for admins alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.auth.service import create_key, hash_token
from app.db.models import ApiKey, Role
from app.runtime import Runtime
from tests.fixtures.service import Keys


def test_missing_and_invalid_keys_are_401(client: TestClient, keys: Keys) -> None:
    missing = client.get("/v1/learnwares")
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"
    assert "missing API key" in missing.json()["error"]["message"]
    assert missing.headers["www-authenticate"] == "Bearer"
    for token in ("nonsense", "pdk_00000000_" + "x" * 43, keys.developer[:-2] + "zz"):
        bad = client.get("/v1/learnwares", headers={"Authorization": f"Bearer {token}"})
        assert bad.status_code == 401
        assert bad.json()["error"]["message"] == "invalid API key"


def test_the_x_api_key_header_works_too(client: TestClient, keys: Keys) -> None:
    assert client.get("/v1/keys/me", headers={"X-API-Key": keys.user}).json()["role"] == "user"


def test_expired_and_revoked_keys_are_401(client: TestClient, keys: Keys, runtime: Runtime) -> None:
    with runtime.db.session() as session:
        expired = create_key(session, role=Role.user, name="old", expires_in=timedelta(seconds=1))
        row = session.get(ApiKey, expired.key.id)
        assert row is not None
        row.expires_at = datetime.now(UTC) - timedelta(minutes=1)
    response = client.get("/v1/keys/me", headers={"Authorization": f"Bearer {expired.token}"})
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]

    me = client.get("/v1/keys/me", headers=keys.auth("user2")).json()
    assert client.delete(f"/v1/admin/keys/{me['id']}", headers=keys.auth("admin")).status_code == 200
    revoked = client.get("/v1/keys/me", headers=keys.auth("user2"))
    assert revoked.status_code == 401
    assert "revoked" in revoked.json()["error"]["message"]


def test_only_hashes_are_stored(runtime: Runtime, keys: Keys, client: TestClient) -> None:
    with runtime.db.session() as session:
        rows = session.scalars(select(ApiKey)).all()
        stored = {r.key_hash for r in rows}
    for token in (keys.admin, keys.developer, keys.user):
        assert hash_token(token) in stored
        assert token not in stored
    listed = client.get("/v1/admin/keys", headers=keys.auth("admin")).json()
    assert all("key_hash" not in k and "token" not in k for k in listed)


def test_an_admin_issues_keys_that_work(client: TestClient, keys: Keys) -> None:
    issued = client.post(
        "/v1/admin/keys",
        headers=keys.auth("admin"),
        json={"role": "developer", "name": "ci", "expires_in_days": 30},
    )
    assert issued.status_code == 201
    body = issued.json()
    assert body["token"].startswith("pdk_" + body["prefix"])
    me = client.get("/v1/keys/me", headers={"Authorization": f"Bearer {body['token']}"}).json()
    assert me["role"] == "developer" and me["name"] == "ci" and me["expires_at"] is not None


ADMIN_ROUTES = [
    ("POST", "/v1/admin/keys", {"role": "admin", "name": "x"}),
    ("GET", "/v1/admin/keys", None),
    ("DELETE", "/v1/admin/keys/1", None),
    ("GET", "/v1/admin/jobs", None),
    ("POST", "/v1/admin/jobs/1/retry", None),
    ("POST", "/v1/admin/learnwares/1/approve", None),
    ("POST", "/v1/admin/learnwares/1/reject", {"reason": "no"}),
    ("POST", "/v1/admin/spec-spaces/x/rebuild", None),
]


@pytest.mark.parametrize("who", ["developer", "user"])
@pytest.mark.parametrize("method,path,body", ADMIN_ROUTES)
def test_admin_routes_are_403_for_others(
    who: str, method: str, path: str, body: dict[str, str] | None, client: TestClient, keys: Keys
) -> None:
    response = client.request(method, path, headers=keys.auth(who), json=body)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert "admin" in response.json()["error"]["message"]


def test_users_cannot_submit_learnwares(client: TestClient, keys: Keys) -> None:
    response = client.post(
        "/v1/learnwares", headers=keys.auth("user"), files={"package": ("p.zip", b"PK", "application/zip")}
    )
    assert response.status_code == 403
    assert "developer or admin" in response.json()["error"]["message"]
