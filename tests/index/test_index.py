"""The per-space index: persisted files, picked up after a restart, rebuilt from the database."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.ml.binary_index import BinarySpecIndex
from app.runtime import Runtime
from tests.fixtures.service import Keys, add_ready_learnware
from tests.pave.test_binary_index import hold_compaction_writes


def test_the_index_file_comes_back_after_a_restart_and_catches_up(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    space_id, dim = space
    rng = np.random.default_rng(4)
    owner = client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"]
    ids = [add_ready_learnware(runtime, owner, f"lw{i}", np.sign(rng.standard_normal(dim))) for i in range(4)]
    live = runtime.indexes.live(space_id)
    assert len(live.index) == 4
    runtime.indexes.save_all()
    files = sorted(p.name for p in (runtime.settings.resolved_index_dir / space_id).iterdir())
    # The default space holds sign specs: a manifest and the packed specs it memory-maps.
    assert len(files) == 2 and {f.rsplit("-", 1)[-1].split(".", 1)[-1] for f in files} == {
        "bits",
        "codes.npy",
    }
    assert any(f.endswith("-v4.bits") for f in files)
    assert isinstance(live.index, BinarySpecIndex) and live.encoding == "sign-bits"

    # A change while "the API is down", then a fresh process on the same data directory.
    late = add_ready_learnware(runtime, owner, "late", np.sign(rng.standard_normal(dim)))
    fresh = Runtime.create(runtime.settings, persist_index=True)
    try:
        with TestClient(create_app(runtime=fresh)) as restarted:
            ready = restarted.get("/readyz").json()
            assert ready["status"] == "ready"
            index = ready["checks"]["index"]
            assert index["source"] == "file" and index["size"] == 5 and index["version"] == 5
            assert fresh.indexes.live(space_id).index.ids() == {*ids, late}
    finally:
        fresh.db.dispose()


def test_a_rebuild_matches_the_database(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    space_id, dim = space
    owner = client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"]
    rng = np.random.default_rng(5)
    ids = [add_ready_learnware(runtime, owner, f"lw{i}", np.sign(rng.standard_normal(dim))) for i in range(3)]
    client.delete(f"/v1/learnwares/{ids[0]}", headers=keys.auth("developer"))
    info = runtime.indexes.rebuild(space_id)
    assert info.size == 2 and info.source == "rebuilt" and info.version == 4
    assert runtime.indexes.live(space_id).index.ids() == set(ids[1:])


def test_rebuild_is_an_admin_job(client: TestClient, keys: Keys, space: tuple[str, int]) -> None:
    response = client.post(f"/v1/admin/spec-spaces/{space[0]}/rebuild", headers=keys.auth("admin"))
    assert response.status_code == 202
    job = client.get(f"/v1/jobs/{response.json()['job_id']}", headers=keys.auth("admin")).json()
    assert job["stage"] == "index.rebuild" and job["queue"] == "cpu"


def test_spec_spaces_describe_what_a_client_needs(
    client: TestClient, keys: Keys, space: tuple[str, int]
) -> None:
    spaces = client.get("/v1/spec-spaces", headers=keys.auth("user")).json()
    assert len(spaces) == 1
    described = spaces[0]
    assert described["id"] == space[0] and described["default"] is True and described["dim"] == space[1]
    assert described["config"]["base"] == "all-MiniLM-L6-v2" and described["config"]["rank"] == 8
    assert described["description"]["base_sha256"]
    assert sum(a * b for a, b in described["description"]["layer_shapes"]) == space[1]


def test_a_request_never_waits_for_the_codes_file_to_be_rewritten(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request that finds the index due a rewrite starts it beside itself and answers; the
    rewrite (held here mid-write) installs its file and saves once done."""
    space_id, dim = space
    rng = np.random.default_rng(6)
    owner = client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"]
    writing, release = hold_compaction_writes(monkeypatch)
    first = add_ready_learnware(runtime, owner, "first", np.sign(rng.standard_normal(dim)))
    started = time.monotonic()
    live = runtime.indexes.live(space_id)  # the first sync: its first save is a rewrite
    assert writing.wait(30) and live.rewrite is not None and live.rewrite.is_alive()
    query = np.sign(rng.standard_normal(dim))
    second = add_ready_learnware(runtime, owner, "second", query)
    matches, version = runtime.indexes.search(space_id, query, 5)
    assert [m.id for m in matches][:1] == [second] and version == live.version
    assert time.monotonic() - started < 10  # answered while the rewrite is held
    assert not list((runtime.settings.resolved_index_dir / space_id).glob("*.bits"))
    release.set()
    runtime.indexes.wait_for_rewrites(30)
    assert not live.rewrite.is_alive() and live.saved_version >= 1
    assert list((runtime.settings.resolved_index_dir / space_id).glob("*.codes.npy"))
    assert live.index.ids() == {first, second}
