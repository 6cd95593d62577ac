"""Engines and sessions. One ``Database`` per process (the API's app state, a worker, the CLI)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout for several processes."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, **kwargs)


class Database:
    """An engine and its session factory. ``info`` is copied into every session it makes."""

    def __init__(self, url: str, *, info: dict[str, Any] | None = None, **engine_kwargs: Any):
        self.url = url
        self.engine = make_engine(url, **engine_kwargs)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False, info=info or {})

    @property
    def backend(self) -> str:
        return self.engine.url.get_backend_name()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: commit on success, roll back on error."""
        session = self.sessionmaker()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()


_AFTER_COMMIT = "pavedock_after_commit"
_AFTER_ROLLBACK = "pavedock_after_rollback"


def on_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the session's transaction commits (dropped on rollback)."""
    session.info.setdefault(_AFTER_COMMIT, []).append(callback)


@event.listens_for(Session, "after_commit")
def _run_after_commit(session: Session) -> None:
    session.info.pop(_AFTER_ROLLBACK, None)
    for callback in session.info.pop(_AFTER_COMMIT, []):
        try:
            callback()
        except Exception:
            log.exception("after-commit callback %r failed", callback)


def on_rollback(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` if the session's transaction rolls back (dropped on commit): undo what
    was written outside the database, such as a stored artifact."""
    session.info.setdefault(_AFTER_ROLLBACK, []).append(callback)


@event.listens_for(Session, "after_rollback")
def _drop_after_rollback(session: Session) -> None:
    session.info.pop(_AFTER_COMMIT, None)
    for callback in session.info.pop(_AFTER_ROLLBACK, []):
        try:
            callback()
        except Exception:
            log.exception("after-rollback callback %r failed", callback)
