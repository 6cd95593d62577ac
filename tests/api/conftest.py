"""The API on a real migrated database: SQLite always, PostgreSQL too when
PAVEDOCK_TEST_POSTGRES_URL is set (every test runs on both). The schema is made by the Alembic
migrations; tables are emptied after each test. The broker is kombu's filesystem transport in a
per-test folder: submitted jobs are really published (no worker consumes them here)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.auth.service import create_key
from app.db.base import Base
from app.db.migrate import upgrade
from app.db.models import Role
from app.main import create_app
from app.ml.pave import PaveSpec
from app.runtime import Runtime
from app.settings import Settings

POSTGRES_ADMIN_URL = os.environ.get("PAVEDOCK_TEST_POSTGRES_URL")
BACKENDS = ["sqlite", "postgresql"] if POSTGRES_ADMIN_URL else ["sqlite"]


@pytest.fixture(scope="session", params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A freshly migrated database for the session."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'dock.sqlite'}"
        upgrade(url)
        yield url
        return
    assert POSTGRES_ADMIN_URL
    name = f"pavedock_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def empty_tables(runtime: Runtime) -> None:
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    with runtime.db.engine.begin() as conn:
        if runtime.db.backend == "postgresql":
            conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                conn.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        environment="testing",
        data_dir=tmp_path / "var",
        database_url=database_url,
        max_upload_bytes=2 * 1024 * 1024,
        job_stale_after_s=30,
    )


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    rt = Runtime.create(settings, persist_index=True)
    try:
        yield rt
    finally:
        empty_tables(rt)
        rt.db.dispose()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime=runtime)) as test_client:
        yield test_client


@dataclass
class Keys:
    admin: str
    developer: str
    developer2: str
    user: str
    user2: str

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, who)}"}


@pytest.fixture
def keys(runtime: Runtime, client: TestClient) -> Keys:
    with runtime.db.session() as session:
        tokens = {
            who: create_key(session, role=role, name=who).token
            for who, role in (
                ("admin", Role.admin),
                ("developer", Role.developer),
                ("developer2", Role.developer),
                ("user", Role.user),
                ("user2", Role.user),
            )
        }
    return Keys(**tokens)


@pytest.fixture
def space(runtime: Runtime, client: TestClient) -> tuple[str, int]:
    """The default space's id and dimension (registered by the app's startup)."""
    from app.db.models import SpecSpaceRecord

    with runtime.db.session() as session:
        record = session.get(SpecSpaceRecord, runtime.default_space_id)
        assert record is not None
        return record.id, record.dim


def write_spec(path: Path, space_id: str, vector: np.ndarray) -> Path:
    """A spec file as a client writes it (PaveSpec.save); returns the .safetensors path."""
    tensors, _ = PaveSpec(space_id=space_id, vector=vector.astype(np.float32), kind="model").save(path)
    return tensors


def broker_messages(runtime: Runtime) -> int:
    """Messages published to the embedded (filesystem) broker."""
    folder = runtime.settings.broker_dir / "queue"
    return sum(1 for p in folder.iterdir() if p.is_file()) if folder.is_dir() else 0


def stored_blobs(runtime: Runtime) -> int:
    root = runtime.settings.resolved_artifacts_dir / "sha256"
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0
