"""Input the database cannot hold is a 422 naming the field, never a 500: ids and pages beyond
the database's integers, durations that overflow, NUL characters (PostgreSQL stores none) and
lone surrogates (not Unicode) in texts, names, queries, parameters and manifests. Runs on SQLite
and, with PAVEDOCK_TEST_POSTGRES_URL, on PostgreSQL, where most of these were 500s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.runtime import Runtime
from tests.fixtures.service import Keys, broker_messages, submit
from tests.learnwares.test_learnwares import assert_nothing_stored, manifest_of, rebuild_zip

BIG = 2**64 + 1
SHOTS = {"texts": ["good", "bad"], "labels": [1, 0], "label_names": ["negative", "positive"]}
NUL = "a\x00b"


def assert_422(response: Any, field: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert field in error["message"], error


@pytest.mark.parametrize(
    ("who", "method", "path", "field"),
    [
        ("user", "GET", f"/v1/learnwares/{BIG}", "learnware_id"),
        ("user", "GET", f"/v1/learnwares/{2**40}", "learnware_id"),  # beyond PostgreSQL's INTEGER
        ("user", "GET", f"/v1/learnwares/{BIG}/package", "learnware_id"),
        ("developer", "DELETE", f"/v1/learnwares/{BIG}", "learnware_id"),
        ("admin", "POST", f"/v1/admin/learnwares/{BIG}/approve", "learnware_id"),
        ("user", "GET", f"/v1/tasks/{BIG}", "task_id"),
        ("user", "GET", f"/v1/jobs/{BIG}", "job_id"),
        ("user", "GET", f"/v1/jobs/{BIG}/events", "job_id"),
        ("user", "POST", f"/v1/jobs/{BIG}/cancel", "job_id"),
        ("admin", "POST", f"/v1/admin/jobs/{BIG}/retry", "job_id"),
        ("admin", "DELETE", f"/v1/admin/keys/{BIG}", "key_id"),
        ("user", "GET", "/v1/learnwares/0", "learnware_id"),
        ("user", "GET", f"/v1/learnwares?page={BIG}", "page"),
        ("user", "GET", f"/v1/tasks?page={BIG}", "page"),
        ("admin", "GET", f"/v1/admin/jobs?offset={BIG}", "offset"),
        ("user", "GET", "/v1/learnwares?q=a%00b", "q"),
        ("user", "GET", "/v1/learnwares?tag=a%00b", "tag"),
        ("user", "GET", "/v1/learnwares?task_type=a%00b", "task_type"),
        ("user", "GET", "/v1/learnwares?model_format=a%00b", "model_format"),
        ("user", "GET", "/v1/learnwares?space_id=a%00b", "space_id"),
        ("user", "GET", "/v1/learnwares?base_model=a%00b", "base_model"),
        ("user", "GET", "/v1/learnwares?license=a%00b", "license"),
        ("user", "GET", "/v1/learnwares?label=ok&label=a%00b", "label"),
        ("user", "GET", f"/v1/learnwares?owner_id={BIG}", "owner_id"),
        ("user", "GET", f"/v1/learnwares?n_classes={BIG}", "n_classes"),
        ("admin", "GET", "/v1/admin/jobs?kind=a%00b", "kind"),
        ("user", "GET", "/v1/spec-spaces/a%00b", "space_id"),
        ("admin", "POST", "/v1/admin/spec-spaces/a%00b/rebuild", "space_id"),
    ],
)
def test_ids_pages_and_queries_out_of_bounds(
    client: TestClient, keys: Keys, who: str, method: str, path: str, field: str
) -> None:
    assert_422(client.request(method, path, headers=keys.auth(who)), field)


def raw(value: str) -> str:
    """A JSON string literal with lone surrogates kept as \\u escapes (as a client may send)."""
    return json.dumps(value, ensure_ascii=True)


@pytest.mark.parametrize(
    ("who", "path", "body", "field"),
    [
        (
            "admin",
            "/v1/admin/keys",
            '{"role": "user", "name": "k", "expires_in_days": 1e308}',
            "expires_in_days",
        ),
        (
            "admin",
            "/v1/admin/keys",
            '{"role": "user", "name": "k", "expires_in_days": Infinity}',
            "expires_in_days",
        ),
        (
            "admin",
            "/v1/admin/keys",
            '{"role": "user", "name": "k", "expires_in_days": NaN}',
            "expires_in_days",
        ),
        ("admin", "/v1/admin/keys", f'{{"role": "user", "name": {raw(NUL)}}}', "name"),
        ("admin", "/v1/admin/keys", '{"role": "user", "name": "\\ud800"}', "name"),
        ("user", "/v1/tasks", json.dumps({**SHOTS, "texts": [NUL, "bad"]}), "texts.0"),
        ("user", "/v1/tasks", json.dumps({**SHOTS, "texts": ["good", "\ud83d"]}), "texts.1"),
        ("user", "/v1/tasks", json.dumps({**SHOTS, "label_names": ["negative", NUL]}), "label_names.1"),
        ("user", "/v1/tasks", json.dumps({**SHOTS, "labels": ["positive", NUL]}), "labels"),
        ("user", "/v1/tasks", json.dumps({**SHOTS, "labels": [1, BIG]}), "labels"),
        ("user", "/v1/tasks", json.dumps({**SHOTS, "texts": ["x"] * 5001, "labels": [0] * 5001}), "texts"),
        ("user", "/v1/merges", json.dumps({"learnware_ids": [1, BIG], "method": "ties"}), "learnware_ids.1"),
        ("user", "/v1/merges", json.dumps({"learnware_ids": [1, 2], "method": NUL}), "method"),
        ("user", "/v1/merges", json.dumps({"learnware_ids": [1, 2], "method": "ties", "name": NUL}), "name"),
        (
            "user",
            "/v1/merges",
            json.dumps({"learnware_ids": [1, 2], "method": "ties", "params": {"k": NUL}}),
            "params",
        ),
        ("user", "/v1/finetunes", json.dumps({**SHOTS, "learnware_id": BIG}), "learnware_id"),
        ("user", "/v1/finetunes", json.dumps({**SHOTS, "learnware_id": 1, "seed": BIG}), "seed"),
        (
            "user",
            "/v1/transfers",
            json.dumps({"learnware_id": 1, "target_base": NUL, "texts": ["a", "b"]}),
            "target_base",
        ),
        ("user", "/v1/tasks/1/reuse", json.dumps({**SHOTS, "merge_params": {NUL: 1}}), "merge_params"),
        ("admin", "/v1/admin/learnwares/1/reject", json.dumps({"reason": NUL}), "reason"),
    ],
)
def test_bodies_out_of_bounds(
    client: TestClient, keys: Keys, who: str, path: str, body: str, field: str
) -> None:
    headers = {**keys.auth(who), "Content-Type": "application/json"}
    assert_422(client.post(path, content=body, headers=headers), field)


def test_task_spec_label_names_must_be_storable(client: TestClient, keys: Keys) -> None:
    response = client.post(
        "/v1/tasks/spec",
        headers=keys.auth("user"),
        files={"spec": ("spec.safetensors", b"\x00" * 16, "application/octet-stream")},
        data={"label_names": json.dumps(["negative", NUL])},
    )
    assert_422(response, "label_names")


@pytest.mark.parametrize(
    ("field", "value"), [("description", NUL), ("name", "evil\x00name"), ("tags", ["ok", "\ud800"])]
)
def test_a_manifest_the_database_cannot_store_is_refused_and_nothing_is_kept(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    tfidf_packages: dict[str, Path],
    field: str,
    value: object,
) -> None:
    manifest = {**manifest_of(tfidf_packages["sst2"]), field: value}
    response = submit(client, keys, rebuild_zip(tfidf_packages["sst2"], manifest=manifest))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_package" and field in error["message"], error
    assert_nothing_stored(runtime)
    assert broker_messages(runtime) == 0


def test_a_package_stored_by_a_transaction_that_fails_is_removed(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    """The package blob is written after its rows; if the transaction still fails (at commit),
    the blob it added is removed, unless a learnware already names it."""
    from app.jobs.service import create_job
    from app.jobs.stages import REBUILD_INDEX
    from app.learnwares.service import _store_package
    from app.storage.store import sha256_file

    def rows(session: Session) -> None:  # what a submission writes before its blob
        create_job(session, kind="index.rebuild", first_stage=REBUILD_INDEX, owner=None, max_attempts=1)

    package = tfidf_packages["trec"]
    sha = sha256_file(package)
    with pytest.raises(RuntimeError, match="commit failed"), runtime.db.session() as session:
        rows(session)
        _store_package(session, runtime, package, sha)
        assert runtime.store.exists(sha)
        raise RuntimeError("commit failed")
    assert not runtime.store.exists(sha)
    # A blob a committed learnware names stays, whatever a later failed transaction did.
    assert submit(client, keys, package).status_code == 202
    with pytest.raises(RuntimeError), runtime.db.session() as session:
        rows(session)
        _store_package(session, runtime, package, sha)
        raise RuntimeError("commit failed")
    assert runtime.store.exists(sha)


def test_a_body_that_is_not_utf8_is_a_422_like_malformed_json(client: TestClient, keys: Keys) -> None:
    headers = {**keys.auth("user"), "Content-Type": "application/json"}
    for body in (b"\xc2\x83{M/#\xff", b'{"texts": ['):
        response = client.post("/v1/tasks", content=body, headers=headers)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "validation_error"
        assert response.json()["error"]["message"].startswith("body")


def test_a_malformed_multipart_form_is_a_422(client: TestClient, keys: Keys) -> None:
    headers = {**keys.auth("developer"), "Content-Type": "multipart/form-data; boundary=xyz"}
    response = client.post("/v1/learnwares", content=b"--xyz\r\nnot a part header\r\n\r\n", headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith("body: could not be parsed")
