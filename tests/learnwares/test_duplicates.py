"""The same weights twice in the market: refused with 409 naming the original, whoever uploads
them, under whatever name or packaging; a different model, the same one after the original is
deleted, or a user's private copy, is accepted."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

import onnx
import yaml
from fastapi.testclient import TestClient
from safetensors.numpy import load_file, save_file
from sqlalchemy import select

from app.db.models import ApiKey, Learnware
from app.learnwares.service import submit
from app.ml.fingerprint import weights_fingerprint
from app.ml.packages import extract_package
from app.runtime import Runtime
from tests.fixtures.service import Keys


def repackaged(
    source: Path, *, manifest: dict[str, object], member: str | None = None, data: bytes = b""
) -> bytes:
    """The package with a new manifest (and one member replaced), recompressed: other zip bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "learnware.yaml":
                body = yaml.safe_dump({**yaml.safe_load(body), **manifest}).encode()
            elif info.filename == member:
                body = data
            elif info.filename == "inputs.jsonl":
                body = b"".join(body.splitlines(keepends=True)[:40])  # fewer declared inputs
            dst.writestr(info.filename, body)
    return out.getvalue()


def post(client: TestClient, keys: Keys, who: str, data: bytes) -> tuple[int, dict[str, object]]:
    response = client.post(
        "/v1/learnwares",
        headers=keys.auth(who),
        files={"package": ("package.zip", data, "application/zip")},
    )
    return response.status_code, response.json()


def renamed_graph(source: Path) -> bytes:
    with zipfile.ZipFile(source) as zf:
        model = onnx.load_from_string(zf.read("model.onnx"))
    model.graph.name = "my_own_model"
    model.producer_name = "someone-else"
    return model.SerializeToString()


def test_the_same_weights_from_another_owner_or_name_are_refused(
    client: TestClient, keys: Keys, tfidf_packages: dict[str, Path]
) -> None:
    original = tfidf_packages["sst2"]
    code, body = post(client, keys, "developer", original.read_bytes())
    assert code == 202, body
    first = body["learnware_id"]

    copies = {
        "the same zip, another owner": ("developer2", original.read_bytes()),
        "another name, licence, inputs and graph name, another owner": (
            "developer2",
            repackaged(
                original,
                manifest={"name": "my-sentiment", "description": "mine", "license": "MIT", "tags": ["x"]},
                member="model.onnx",
                data=renamed_graph(original),
            ),
        ),
        "another name, same owner": ("developer", repackaged(original, manifest={"name": "sst2-again"})),
    }
    for what, (who, data) in copies.items():
        code, body = post(client, keys, who, data)
        assert code == 409, (what, body)
        error = body["error"]
        assert isinstance(error, dict) and error["code"] == "conflict"
        assert f"learnware {first}" in str(error["message"]), (what, error)
    assert "another developer's" in str(post(client, keys, "developer2", copies[next(iter(copies))][1])[1])

    # Nothing was stored for the refused copies; a different model is welcome.
    listed = client.get("/v1/learnwares", headers=keys.auth("admin")).json()
    assert listed["pagination"]["total_count"] == 1
    code, body = post(client, keys, "developer2", tfidf_packages["trec"].read_bytes())
    assert code == 202, body

    # Once the original is deleted, its weights may come back (from anyone).
    assert client.delete(f"/v1/learnwares/{first}", headers=keys.auth("developer")).status_code == 200
    code, body = post(
        client, keys, "developer2", copies["another name, licence, inputs and graph name, another owner"][1]
    )
    assert code == 202, body
    stored = client.get(f"/v1/learnwares/{body['learnware_id']}", headers=keys.auth("developer2")).json()
    assert stored["name"] == "my-sentiment" and len(stored["weights_sha256"]) == 64


def test_the_fingerprint_is_of_the_tensors_not_the_file(
    lora_packages: dict[str, Path], tmp_path: Path
) -> None:
    """Tensor order and metadata in a safetensors file do not change it; one changed value does."""
    package = extract_package(lora_packages["sst2"], tmp_path / "a")
    weights = package.model_path / "adapter_model.safetensors"
    before = weights_fingerprint(package)
    tensors = load_file(str(weights))
    names = sorted(tensors, reverse=True)
    with tempfile.TemporaryDirectory() as tmp:
        reordered = Path(tmp) / "w.safetensors"
        save_file({n: tensors[n] for n in names}, str(reordered), metadata={"format": "np", "by": "someone"})
        assert reordered.read_bytes() != weights.read_bytes()
        weights.write_bytes(reordered.read_bytes())
    assert weights_fingerprint(package) == before
    changed = dict(tensors)
    changed[names[0]] = changed[names[0]].copy()
    changed[names[0]].flat[0] += 1e-3
    save_file(changed, str(weights))
    assert weights_fingerprint(package) != before


def test_private_learnwares_may_repeat_weights(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path], tmp_path: Path
) -> None:
    """A user's own merge or fine-tune (private, never indexed) may equal a public learnware,
    as reuse jobs register it; the market itself stays free of copies."""
    original = tfidf_packages["sst2"]
    code, body = post(client, keys, "developer", original.read_bytes())
    assert code == 202, body
    copy = tmp_path / "mine.zip"
    copy.write_bytes(repackaged(original, manifest={"name": "my private merge"}))
    with runtime.db.session() as session:
        user = session.scalar(select(ApiKey).where(ApiKey.name == "user"))
        assert user is not None
        mine, _ = submit(session, runtime, user, copy, None, private=True)
        assert mine.private and mine.id != body["learnware_id"]
        first = session.get(Learnware, body["learnware_id"])
        assert first is not None and mine.weights_sha256 == first.weights_sha256
