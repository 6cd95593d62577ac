"""Learnware submission, listing, download and deletion through the real app and database.

Every bad input gets a clear 4xx with its reason, and nothing is stored, enqueued or indexed.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.db.models import Job, JobState, Learnware, LearnwareStatus, Spec, SpecSource, SpecSpaceRecord
from app.runtime import Runtime
from tests.fixtures.service import Keys, broker_messages, stored_blobs, submit, write_spec


def rebuild_zip(
    source: Path,
    *,
    drop: tuple[str, ...] = (),
    add: list[tuple[zipfile.ZipInfo | str, bytes]] = (),
    manifest: dict | None = None,
) -> bytes:  # type: ignore[assignment,type-arg]
    """The real package with members dropped, added, or its manifest replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename in drop:
                continue
            data = src.read(info)
            if info.filename == "learnware.yaml" and manifest is not None:
                data = yaml.safe_dump(manifest).encode()
            dst.writestr(info, data)
        for info, data in add:
            dst.writestr(info, data)
    return out.getvalue()


def manifest_of(source: Path) -> dict:  # type: ignore[type-arg]
    with zipfile.ZipFile(source) as zf:
        return dict(yaml.safe_load(zf.read("learnware.yaml")))


def symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


class Evil:
    def __reduce__(self) -> tuple[Callable[..., object], tuple[str]]:
        return (print, ("pwned",))


def assert_nothing_stored(runtime: Runtime) -> None:
    with runtime.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Learnware)) == 0
        assert session.scalar(select(func.count()).select_from(Job)) == 0
        assert session.scalar(select(func.count()).select_from(Spec)) == 0
        assert (
            session.scalar(
                select(SpecSpaceRecord.index_version).where(SpecSpaceRecord.id == runtime.default_space_id)
            )
            == 0
        )
    assert stored_blobs(runtime) == 0
    assert broker_messages(runtime) == 0
    assert len(runtime.indexes.live(runtime.default_space_id).index) == 0
    scratch = runtime.settings.scratch_dir
    assert not any(scratch.iterdir()), f"scratch files left behind: {list(scratch.iterdir())}"


def test_submit_stores_the_package_and_queues_its_validation(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    package = tfidf_packages["sst2"]
    response = submit(client, keys, package)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "pending" and body["spec_uploaded"] is False
    learnware = client.get(f"/v1/learnwares/{body['learnware_id']}", headers=keys.auth("developer")).json()
    assert learnware["name"] == manifest_of(package)["name"]
    assert learnware["package_sha256"] == hashlib.sha256(package.read_bytes()).hexdigest()
    assert learnware["label_names"] == ["negative", "positive"]
    job = client.get(f"/v1/jobs/{body['job_id']}", headers=keys.auth("developer")).json()
    assert job["state"] == "queued" and job["stage"] == "learnware.validate" and job["queue"] == "cpu"
    assert broker_messages(runtime) == 1
    assert stored_blobs(runtime) == 1
    # Not ready: other developers and users do not see it; the admin does.
    assert (
        client.get(f"/v1/learnwares/{body['learnware_id']}", headers=keys.auth("developer2")).status_code
        == 404
    )
    assert client.get(f"/v1/learnwares/{body['learnware_id']}", headers=keys.auth("admin")).status_code == 200
    assert client.get("/v1/learnwares", headers=keys.auth("user")).json()["pagination"]["total_count"] == 0


def test_resubmitting_the_same_package_is_a_conflict(
    client: TestClient, keys: Keys, tfidf_packages: dict[str, Path]
) -> None:
    first = submit(client, keys, tfidf_packages["sst2"])
    again = submit(client, keys, tfidf_packages["sst2"])
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert f"learnware {first.json()['learnware_id']}" in again.json()["error"]["message"]


BAD_PACKAGES: dict[str, tuple[Callable[[Path], bytes], int, str, str]] = {
    "not a zip": (lambda p: b"this is not a zip archive" * 40, 422, "invalid_package", "not a zip archive"),
    "zip bomb (ratio)": (
        lambda p: rebuild_zip(p, add=[("weights.safetensors", b"\0" * (32 << 20))]),
        422,
        "unsafe_package",
        "zip bomb",
    ),
    "path traversal": (
        lambda p: rebuild_zip(p, add=[("../escape.txt", b"x")]),
        422,
        "unsafe_package",
        "'..'",
    ),
    "absolute path": (
        lambda p: rebuild_zip(p, add=[("/etc/cron.d/x", b"x")]),
        422,
        "unsafe_package",
        "absolute",
    ),
    "symlink": (
        lambda p: rebuild_zip(p, add=[(symlink("link"), b"/etc/passwd")]),
        422,
        "unsafe_package",
        "symbolic link",
    ),
    "pickle by name": (
        lambda p: rebuild_zip(p, add=[("model.pkl", pickle.dumps(Evil()))]),
        422,
        "unsafe_package",
        ".pkl",
    ),
    "pickle by content": (
        lambda p: rebuild_zip(p, add=[("weights.data", pickle.dumps(Evil()))]),
        422,
        "unsafe_package",
        "pickle",
    ),
    "python code": (lambda p: rebuild_zip(p, add=[("setup.py", b"import os")]), 422, "unsafe_package", ".py"),
    "no manifest": (
        lambda p: rebuild_zip(p, drop=("learnware.yaml",)),
        422,
        "invalid_package",
        "learnware.yaml",
    ),
    "manifest without licence": (
        lambda p: rebuild_zip(p, manifest={k: v for k, v in manifest_of(p).items() if k != "license"}),
        422,
        "invalid_package",
        "license",
    ),
    "manifest with one label": (
        lambda p: rebuild_zip(p, manifest={**manifest_of(p), "label_names": ["only"]}),
        422,
        "invalid_package",
        "at least two label names",
    ),
    "unknown model format": (
        lambda p: rebuild_zip(p, manifest={**manifest_of(p), "model_format": "pytorch-pickle"}),
        422,
        "invalid_package",
        "model_format",
    ),
    "model file missing": (
        lambda p: rebuild_zip(p, drop=("model.onnx",)),
        422,
        "invalid_package",
        "model.onnx",
    ),
    "no declared inputs": (
        lambda p: rebuild_zip(
            p, drop=("inputs.jsonl",), manifest={k: v for k, v in manifest_of(p).items() if k != "inputs"}
        ),
        422,
        "invalid_package",
        "declares no inputs",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PACKAGES))
def test_bad_packages_are_refused_with_their_reason_and_nothing_is_kept(
    case: str, client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    make, status, code, reason = BAD_PACKAGES[case]
    response = submit(client, keys, make(tfidf_packages["sst2"]))
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert reason in error["message"]
    assert_nothing_stored(runtime)


def test_an_upload_over_the_limit_is_413_and_not_kept(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    big = rebuild_zip(
        tfidf_packages["sst2"], add=[("weights.safetensors", np.random.default_rng(0).bytes(3 << 20))]
    )
    response = submit(client, keys, big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    # Without a Content-Length (chunked), the limit is enforced while the body streams in.
    boundary = "pavedockboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="package"; filename="p.zip"\r\n'
        "Content-Type: application/zip\r\n\r\n"
    ).encode()

    def chunks():  # type: ignore[no-untyped-def]
        yield head
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]
        yield f"\r\n--{boundary}--\r\n".encode()

    streamed = client.post(
        "/v1/learnwares",
        headers={**keys.auth("developer"), "Content-Type": f"multipart/form-data; boundary={boundary}"},
        content=chunks(),
    )
    assert streamed.status_code == 413
    assert streamed.json()["error"]["code"] == "payload_too_large"
    assert_nothing_stored(runtime)


def spec_cases(space_id: str, dim: int) -> dict[str, tuple[str, np.ndarray, str]]:
    ok = np.sign(np.random.default_rng(0).standard_normal(dim)).astype(np.float32)
    nan = ok.copy()
    nan[3] = np.nan
    return {
        "wrong space": ("pave-000000000000000000000000", ok, "not " + space_id),
        "wrong shape": (space_id, ok[:100], "shape (100,)"),
        "NaN": (space_id, nan, "NaN"),
        "all zeros": (space_id, np.zeros(dim, np.float32), "all zeros"),
    }


@pytest.mark.parametrize("case", ["wrong space", "wrong shape", "NaN", "all zeros", "not safetensors"])
def test_bad_uploaded_specs_are_refused(
    case: str,
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    space: tuple[str, int],
    tfidf_packages: dict[str, Path],
    tmp_path: Path,
) -> None:
    space_id, dim = space
    if case == "not safetensors":
        spec = tmp_path / "spec.safetensors"
        spec.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
        reason = "not safetensors"
    else:
        claimed, vector, reason = spec_cases(space_id, dim)[case]
        spec = write_spec(tmp_path / "spec", claimed, vector)
    response = submit(client, keys, tfidf_packages["sst2"], spec=spec)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "incompatible_spec"
    assert reason in response.json()["error"]["message"]
    assert_nothing_stored(runtime)


def test_a_valid_uploaded_spec_is_kept_for_the_worker_to_check(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    space: tuple[str, int],
    tfidf_packages: dict[str, Path],
    tmp_path: Path,
) -> None:
    space_id, dim = space
    spec = write_spec(tmp_path / "spec", space_id, np.sign(np.random.default_rng(1).standard_normal(dim)))
    response = submit(client, keys, tfidf_packages["sst2"], spec=spec)
    assert response.status_code == 202, response.text
    assert response.json()["spec_uploaded"] is True
    with runtime.db.session() as session:
        learnware = session.get(Learnware, response.json()["learnware_id"])
        assert learnware is not None and learnware.uploaded_spec_id is not None
        row = session.get(Spec, learnware.uploaded_spec_id)
        assert row is not None and row.source == SpecSource.uploaded and row.dim == dim


def test_list_filters_and_paginates(client: TestClient, keys: Keys, tfidf_packages: dict[str, Path]) -> None:
    ids = [submit(client, keys, p).json()["learnware_id"] for p in tfidf_packages.values()]
    mine = client.get("/v1/learnwares", headers=keys.auth("developer"), params={"limit": 2}).json()
    assert mine["pagination"] == {"total_count": 3, "page": 1, "limit": 2, "max_page": 2}
    assert [lw["id"] for lw in mine["items"]] == sorted(ids, reverse=True)[:2]
    page2 = client.get(
        "/v1/learnwares", headers=keys.auth("developer"), params={"limit": 2, "page": 2}
    ).json()
    assert [lw["id"] for lw in page2["items"]] == [min(ids)]
    by_tag = client.get("/v1/learnwares", headers=keys.auth("developer"), params={"tag": "trec"}).json()
    assert [lw["name"] for lw in by_tag["items"]] == ["trec-tfidf-good-s0"]
    by_text = client.get("/v1/learnwares", headers=keys.auth("developer"), params={"q": "SMS_SPAM"}).json()
    assert by_text["pagination"]["total_count"] == 1
    pending = client.get("/v1/learnwares", headers=keys.auth("developer"), params={"status": "ready"}).json()
    assert pending["items"] == []
    bad = client.get("/v1/learnwares", headers=keys.auth("developer"), params={"status": "sleeping"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"


def test_download_returns_the_exact_package(
    client: TestClient, keys: Keys, tfidf_packages: dict[str, Path]
) -> None:
    package = tfidf_packages["trec"]
    learnware_id = submit(client, keys, package).json()["learnware_id"]
    response = client.get(f"/v1/learnwares/{learnware_id}/package", headers=keys.auth("developer"))
    assert response.status_code == 200
    assert response.content == package.read_bytes()
    assert response.headers["x-content-sha256"] == hashlib.sha256(package.read_bytes()).hexdigest()
    assert response.headers["content-type"] == "application/zip"


def test_only_the_owner_or_an_admin_deletes(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    sub = submit(client, keys, tfidf_packages["sst2"]).json()
    learnware_id = sub["learnware_id"]
    with runtime.db.session() as session:  # make it visible to everyone
        learnware = session.get(Learnware, learnware_id)
        assert learnware is not None
        learnware.status = LearnwareStatus.ready
    other = client.delete(f"/v1/learnwares/{learnware_id}", headers=keys.auth("developer2"))
    assert other.status_code == 403
    assert other.json()["error"] == {
        "code": "forbidden",
        "message": f"learnware {learnware_id} belongs to another developer; you cannot delete it",
    }
    assert client.delete(f"/v1/learnwares/{learnware_id}", headers=keys.auth("user")).status_code == 403
    owner = client.delete(f"/v1/learnwares/{learnware_id}", headers=keys.auth("developer"))
    assert owner.status_code == 200 and owner.json()["status"] == "deleted"
    assert client.get(f"/v1/learnwares/{learnware_id}", headers=keys.auth("developer")).status_code == 404
    assert client.delete(f"/v1/learnwares/{learnware_id}", headers=keys.auth("developer")).status_code == 404
    assert stored_blobs(runtime) == 0  # the package is removed once nothing uses it
    with runtime.db.session() as session:
        job = session.get(Job, sub["job_id"])
        assert job is not None and job.state == JobState.cancelled


def test_admin_deletes_any_learnware(client: TestClient, keys: Keys, tfidf_packages: dict[str, Path]) -> None:
    learnware_id = submit(client, keys, tfidf_packages["sst2"]).json()["learnware_id"]
    assert client.delete(f"/v1/learnwares/{learnware_id}", headers=keys.auth("admin")).status_code == 200


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/v1/learnwares/999"),
        ("GET", "/v1/learnwares/999/package"),
        ("DELETE", "/v1/learnwares/999"),
        ("GET", "/v1/jobs/999"),
        ("GET", "/v1/jobs/999/events"),
        ("POST", "/v1/jobs/999/cancel"),
        ("GET", "/v1/tasks/999"),
        ("GET", "/v1/spec-spaces/pave-unknown"),
    ],
)
def test_unknown_ids_are_404(method: str, path: str, client: TestClient, keys: Keys) -> None:
    response = client.request(method, path, headers=keys.auth("developer"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert (
        "999" in response.json()["error"]["message"] or "pave-unknown" in response.json()["error"]["message"]
    )


def test_ids_must_be_integers(client: TestClient, keys: Keys) -> None:
    response = client.get("/v1/learnwares/abc", headers=keys.auth("developer"))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
