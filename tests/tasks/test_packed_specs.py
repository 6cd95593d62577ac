"""Specs of a sign space sent, stored and ranked as packed bits; bad encodings refused."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from safetensors.numpy import save

from app.db.models import Spec, UserTask
from app.errors import IncompatibleSpec
from app.ml.pave import read_spec_file
from app.runtime import Runtime
from tests.fixtures.service import Keys, add_ready_learnware, submit, write_spec
from tests.learnwares.test_learnwares import assert_nothing_stored


def packed_spec(path: Path, space_id: str, bits: np.ndarray) -> Path:
    """A spec file holding the signs packed (U8), as a client sends a sign spec at its real size."""
    path.write_bytes(
        save({"pave": np.ascontiguousarray(bits, dtype=np.uint8)}, metadata={"space_id": space_id})
    )
    return path


def identify(client: TestClient, keys: Keys, spec: Path, k: int = 3):  # type: ignore[no-untyped-def]
    return client.post(
        "/v1/identify",
        headers=keys.auth("user"),
        files={"spec": ("s", spec.read_bytes())},
        data={"k": str(k)},
    )


def test_the_space_says_its_encoding(client: TestClient, keys: Keys, space: tuple[str, int]) -> None:
    body = client.get(f"/v1/spec-spaces/{space[0]}", headers=keys.auth("user")).json()
    assert body["encoding"] == "sign-bits" and "U8" in body["spec_format"]


def test_a_packed_query_ranks_as_its_float_form(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int], tmp_path: Path
) -> None:
    space_id, dim = space
    rng = np.random.default_rng(11)
    me = client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"]
    vectors = [np.sign(rng.standard_normal(dim)) for _ in range(4)]
    ids = [add_ready_learnware(runtime, me, f"lw{i}", v) for i, v in enumerate(vectors)]
    query = np.where(rng.random(dim) < 0.2, -vectors[2], vectors[2])
    as_float = identify(client, keys, write_spec(tmp_path / "f", space_id, query))
    as_bits = identify(
        client, keys, packed_spec(tmp_path / "b.safetensors", space_id, np.packbits(query > 0))
    )
    assert as_float.status_code == as_bits.status_code == 200, as_bits.text
    assert as_float.json()["spec_received"] == "float32" and as_bits.json()["spec_received"] == "sign-bits"
    assert as_bits.json()["space_encoding"] == "sign-bits"
    assert as_bits.json()["matches"] == as_float.json()["matches"]
    best = as_bits.json()["matches"][0]
    assert best["learnware_id"] == ids[2] and best["score"] == pytest.approx(
        float(query @ vectors[2]) / dim, abs=1e-6
    )


def test_a_task_spec_is_stored_packed_whichever_form_it_came_in(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int], tmp_path: Path
) -> None:
    space_id, dim = space
    vector = np.sign(np.random.default_rng(12).standard_normal(dim))
    for spec in (
        write_spec(tmp_path / "f", space_id, vector),
        packed_spec(tmp_path / "b.safetensors", space_id, np.packbits(vector > 0)),
    ):
        response = client.post(
            "/v1/tasks/spec", headers=keys.auth("user"), files={"spec": ("s", spec.read_bytes())}
        )
        assert response.status_code == 202, response.text
        assert response.json()["spec_stored"] == "sign-bits"
        with runtime.db.session() as session:
            task = session.get(UserTask, response.json()["task_id"])
            assert task is not None and task.spec_id is not None
            stored = session.get(Spec, task.spec_id)
            assert stored is not None and len(stored.vector) == dim // 8 and stored.dim == dim
            assert np.array_equal(
                np.unpackbits(np.frombuffer(stored.vector, np.uint8)), (vector > 0).astype(np.uint8)
            )


@pytest.mark.parametrize("case", ["not signs", "packed too short", "packed too long", "U16"])
def test_bad_encodings_are_refused_with_the_reason(
    case: str,
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    space: tuple[str, int],
    tfidf_packages: dict[str, Path],
    tmp_path: Path,
) -> None:
    space_id, dim = space
    path = tmp_path / "spec.safetensors"
    if case == "not signs":
        write_spec(tmp_path / "spec", space_id, np.random.default_rng(0).standard_normal(dim))
        reason = "every value must be +1 or -1"
    elif case == "packed too short":
        packed_spec(path, space_id, np.zeros(dim // 8 - 1, np.uint8))
        reason = f"needs ({dim // 8},) bytes"
    elif case == "packed too long":
        packed_spec(path, space_id, np.full(dim // 8 + 1, 255, np.uint8))
        reason = f"needs ({dim // 8},) bytes"
    else:
        path.write_bytes(save({"pave": np.zeros(dim, np.uint16)}, metadata={"space_id": space_id}))
        reason = "dtype U16"
    for response in (identify(client, keys, path), submit(client, keys, tfidf_packages["sst2"], spec=path)):
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "incompatible_spec"
        assert reason in response.json()["error"]["message"]
    assert_nothing_stored(runtime)


def test_a_query_before_any_learnware_is_indexed(
    client: TestClient, keys: Keys, space: tuple[str, int], tmp_path: Path
) -> None:
    space_id, dim = space
    spec = packed_spec(
        tmp_path / "b.safetensors", space_id, np.packbits(np.random.default_rng(3).random(dim) < 0.5)
    )
    response = identify(client, keys, spec)
    assert response.status_code == 200 and response.json()["matches"] == []


@pytest.mark.parametrize(
    ("shape", "data", "match"),
    [
        ([2**32, 2**32], b"", "over the limit"),  # wraps to 0 elements in 64-bit arithmetic
        ([576], bytes(575), "needs 576 bytes"),
    ],
)
def test_a_packed_spec_file_passes_the_same_header_checks(
    tmp_path: Path, shape: list[int], data: bytes, match: str
) -> None:
    header = json.dumps(
        {
            "__metadata__": {"space_id": "pave-test"},
            "pave": {"dtype": "U8", "shape": shape, "data_offsets": [0, len(data)]},
        }
    ).encode()
    path = tmp_path / "spec.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    with pytest.raises(IncompatibleSpec, match=match):
        read_spec_file(path)


def test_an_honest_packed_spec_file_is_read_as_bits(tmp_path: Path) -> None:
    bits = np.packbits(np.random.default_rng(4).random(4608) < 0.5)
    uploaded = read_spec_file(packed_spec(tmp_path / "spec.safetensors", "pave-test", bits))
    assert uploaded.encoding == "sign-bits" and uploaded.vector.dtype == np.uint8
    np.testing.assert_array_equal(uploaded.vector, bits)
