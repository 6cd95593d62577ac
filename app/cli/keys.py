"""``pavedock keys``: API keys made directly in the database (how the first admin key is made)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from app.cli.common import console
from app.cli.database import open_database

keys_app = typer.Typer(
    no_args_is_help=True, help="API keys, made directly in the database (first admin key)."
)


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")


def create_key_in_db(role: str, name: str, expires_days: float | None = None) -> str:
    """Issue a key straight into the configured database; returns the token."""
    from datetime import timedelta

    from app.auth.service import create_key
    from app.db.models import Role

    db = open_database()
    try:
        with db.session() as session:
            issued = create_key(
                session,
                role=Role(role),
                name=name,
                expires_in=timedelta(days=expires_days) if expires_days else None,
            )
            return issued.token
    finally:
        db.dispose()


@keys_app.command("create")
def keys_create(
    role: Annotated[str, typer.Option(help="developer, user or admin")],
    name: Annotated[str, typer.Option(help="who or what the key is for")] = "cli",
    expires_days: Annotated[float | None, typer.Option(help="days until it expires (default: never)")] = None,
) -> None:
    """Create a key in the database (how the first admin key is made); prints the token once."""
    if role not in ("developer", "user", "admin"):
        raise typer.BadParameter("role must be developer, user or admin")
    token = create_key_in_db(role, name, expires_days)
    console.print(f"{role} key created; store it now, it is not shown again:")
    typer.echo(token)


@keys_app.command("list")
def keys_list() -> None:
    """Keys in the database (prefixes and metadata; secrets are never stored)."""
    from app.auth.repository import list_keys

    db = open_database()
    try:
        with db.session() as session:
            table = Table("id", "prefix", "role", "name", "created", "expires", "revoked")
            for key in list_keys(session):
                table.add_row(
                    str(key.id),
                    key.prefix,
                    key.role.value,
                    key.name,
                    f"{key.created_at:%Y-%m-%d %H:%M}",
                    f"{key.expires_at:%Y-%m-%d %H:%M}" if key.expires_at else "",
                    f"{key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "",
                )
            console.print(table)
    finally:
        db.dispose()


@keys_app.command("revoke")
def keys_revoke(key_id: int) -> None:
    """Revoke a key by id."""
    from app.auth.service import revoke_key

    db = open_database()
    try:
        with db.session() as session:
            key = revoke_key(session, key_id)
            console.print(f"key {key.prefix} revoked")
    finally:
        db.dispose()
