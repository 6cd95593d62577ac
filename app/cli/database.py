"""``pavedock db``: the database schema (Alembic migrations), and the database the other direct
commands (keys, the server's first-key hint) open."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from app.cli.common import console, fail

db_app = typer.Typer(no_args_is_help=True, help="The database schema (Alembic migrations).")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(
    wait: Annotated[float, typer.Option(help="seconds to wait for the database to accept connections")] = 0.0,
) -> None:
    """Wait for the database (optionally), then apply every migration (the prestart step)."""
    from app.db.migrate import upgrade
    from app.db.session import Database
    from app.settings import get_settings

    settings = get_settings()
    settings.ensure_dirs()
    url = settings.resolved_database_url
    deadline = time.monotonic() + wait
    while True:
        db = Database(url)
        try:
            db.ping()
            break
        except Exception as exc:
            if time.monotonic() > deadline:
                fail(exc)
            console.print(f"waiting for the database: {type(exc).__name__}")
            time.sleep(1.0)
        finally:
            db.dispose()
    upgrade(url)
    console.print("database at the latest migration")


@db_app.command("current")
def db_current() -> None:
    """The database's migration revision and the latest one."""
    from app.db.migrate import current_revision, head_revision
    from app.db.session import Database
    from app.settings import get_settings

    url = get_settings().resolved_database_url
    db = Database(url)
    try:
        console.print(f"current {current_revision(db.engine)}, head {head_revision(url)}")
    finally:
        db.dispose()


def open_database() -> Any:
    from app.db.migrate import upgrade
    from app.db.session import Database
    from app.settings import get_settings

    settings = get_settings()
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    return Database(settings.resolved_database_url)


def admin_exists() -> bool:
    from sqlalchemy import select

    from app.db.models import ApiKey, Role

    db = open_database()
    try:
        with db.session() as session:
            return (
                session.scalar(
                    select(ApiKey.id).where(ApiKey.role == Role.admin, ApiKey.revoked_at.is_(None))
                )
                is not None
            )
    finally:
        db.dispose()
