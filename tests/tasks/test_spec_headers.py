"""Spec files are checked from their header before anything is allocated: a declared shape whose
element count overflows 64 bits is a 422 with the reason, never a 500."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from app.runtime import Runtime
from tests.fixtures.service import Keys, submit
from tests.learnwares.test_package_content import assert_refused


def overflowing_spec(path: Path, space_id: str) -> Path:
    header = {
        "__metadata__": {"space_id": space_id},
        "pave": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]},
    }
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text)
    return path


def test_a_spec_declaring_an_overflowing_shape_is_a_422(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    space: tuple[str, int],
    tfidf_packages: dict[str, Path],
    tmp_path: Path,
) -> None:
    spec = overflowing_spec(tmp_path / "spec.safetensors", space[0])
    response = submit(client, keys, tfidf_packages["sst2"], spec=spec)
    assert_refused(response, "incompatible_spec", "over the limit", runtime)


def test_a_task_spec_declaring_an_overflowing_shape_is_a_422(
    client: TestClient, keys: Keys, space: tuple[str, int], tmp_path: Path
) -> None:
    spec = overflowing_spec(tmp_path / "spec.safetensors", space[0])
    response = client.post(
        "/v1/tasks/spec", headers=keys.auth("user"), files={"spec": ("s", spec.read_bytes())}
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "incompatible_spec"
    assert "over the limit" in response.json()["error"]["message"]
