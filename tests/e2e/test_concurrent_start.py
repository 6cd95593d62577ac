"""Two API processes start on a fresh database, ten times out of ten: uvicorn with two workers
(the image's default) on a freshly migrated database (PostgreSQL when PAVEDOCK_TEST_POSTGRES_URL
is set, SQLite otherwise), both registering the spec space at once."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from app.db.migrate import upgrade
from app.db.models import SpecSpaceRecord
from app.db.session import Database
from tests.e2e.conftest import PYTHON, TEST_ENV, Proc, Processes, free_port, wait_ready

pytestmark = pytest.mark.e2e

POSTGRES_URL = os.environ.get("PAVEDOCK_TEST_POSTGRES_URL")
STARTS = 10


@pytest.fixture
def fresh_database(tmp_path: Path) -> Iterator[Callable[[int], str]]:
    """Makes a freshly migrated database per start: PostgreSQL if one is given, else SQLite."""
    made: list[str] = []

    def make(n: int) -> str:
        if not POSTGRES_URL:
            url = f"sqlite:///{tmp_path / f'dock-{n}.sqlite'}"
        else:
            name = f"pavedock_start_{uuid.uuid4().hex[:8]}"
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            made.append(name)
            url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        return url

    admin = create_engine(POSTGRES_URL or "sqlite://", isolation_level="AUTOCOMMIT")
    try:
        yield make
    finally:
        if POSTGRES_URL:
            with admin.connect() as conn:
                for name in made:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def database(url: str) -> Iterator[Database]:
    db = Database(url)
    try:
        yield db
    finally:
        db.dispose()


def started_log(api: Proc, workers: int, timeout: float = 120.0) -> str:
    """The server's log once ``workers`` processes said their startup completed (or it failed)."""
    deadline = time.monotonic() + timeout
    while True:
        log = api.log.read_text(errors="replace")
        done = log.count("Application startup complete.") >= workers
        if done or "Traceback" in log or not api.alive or time.monotonic() > deadline:
            return log
        time.sleep(0.2)


def stop_parent(api: Proc) -> None:
    assert api.popen is not None
    api.popen.send_signal(signal.SIGTERM)
    try:
        api.popen.wait(timeout=60)
    finally:
        api.kill()  # stragglers of the group


def test_two_api_processes_start_on_a_fresh_database(
    fresh_database: Callable[[int], str], processes: Processes, tmp_path: Path
) -> None:
    for n in range(STARTS):
        url = fresh_database(n)
        port = free_port()
        env = {
            **os.environ,
            **TEST_ENV,
            "PAVEDOCK_ENVIRONMENT": "testing",
            "PAVEDOCK_DATABASE_URL": url,
            "PAVEDOCK_BROKER_URL": "",
            "PAVEDOCK_DATA_DIR": str(tmp_path / f"data-{n}"),
        }
        args = [PYTHON, "-m", "uvicorn", "app.main:create_app", "--factory"]
        args += ["--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
        api = processes.start(Proc(f"api-{n}", args, env, tmp_path / f"api-{n}.log"))
        wait_ready(f"http://127.0.0.1:{port}", api)
        log = started_log(api, workers=2)
        stop_parent(api)  # uvicorn stops its workers (a signal to each would have it respawn them)
        assert log.count("Application startup complete.") == 2, f"start {n}:\n{log}"
        assert "Traceback" not in log and "startup failed" not in log, f"start {n}:\n{log}"
        with database(url) as db, db.session() as session:
            assert session.scalar(select(func.count()).select_from(SpecSpaceRecord)) == 1
