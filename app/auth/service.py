"""Create, check and revoke API keys. Only the sha256 of a key is stored; the token is shown once.

A token reads ``pdk_<prefix>_<secret>``: the prefix names the key in lists and logs, the secret
is 32 random bytes, so a plain sha256 is a safe hash (no dictionary to guess from).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from app.auth import repository
from app.db.base import utcnow
from app.db.models import ApiKey, Role
from app.errors import Forbidden, NotFound, Unauthorized

TOKEN_PREFIX = "pdk_"
_TOUCH_EVERY = timedelta(minutes=1)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedKey:
    """A new key and its token (the only time the token exists outside the caller)."""

    key: ApiKey
    token: str


def create_key(
    session: Session,
    *,
    role: Role,
    name: str,
    expires_in: timedelta | None = None,
    created_by: ApiKey | None = None,
) -> IssuedKey:
    """Issue a key; the caller commits."""
    while True:
        prefix = secrets.token_hex(4)
        if not repository.prefix_taken(session, prefix):
            break
    token = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey(
        name=name,
        prefix=prefix,
        key_hash=hash_token(token),
        role=role,
        expires_at=utcnow() + expires_in if expires_in else None,
        created_by_id=created_by.id if created_by else None,
    )
    session.add(key)
    session.flush()
    return IssuedKey(key=key, token=token)


def authenticate(session: Session, token: str | None) -> ApiKey:
    """The key behind ``token``, or Unauthorized saying why not."""
    if not token:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")
    if not token.startswith(TOKEN_PREFIX):
        raise Unauthorized("invalid API key")
    key = repository.by_hash(session, hash_token(token))
    if key is None or not secrets.compare_digest(key.key_hash, hash_token(token)):
        raise Unauthorized("invalid API key")
    now = utcnow()
    if key.revoked_at is not None:
        raise Unauthorized(f"API key {key.prefix} was revoked")
    if key.expires_at is not None and key.expires_at <= now:
        raise Unauthorized(f"API key {key.prefix} expired at {key.expires_at.isoformat()}")
    return touch(key)


def touch(key: ApiKey) -> ApiKey:
    """Note that ``key`` was used now (at most once a minute: no write per request)."""
    now = utcnow()
    if key.last_used_at is None or now - key.last_used_at > _TOUCH_EVERY:
        key.last_used_at = now
    return key


def require_role(key: ApiKey, *roles: Role) -> ApiKey:
    if key.role not in roles:
        allowed = " or ".join(r.value for r in roles)
        raise Forbidden(f"this needs a {allowed} key; {key.prefix} is a {key.role.value} key")
    return key


def revoke_key(session: Session, key_id: int) -> ApiKey:
    key = repository.by_id(session, key_id)
    if key is None:
        raise NotFound(f"no API key {key_id}")
    if key.revoked_at is None:
        key.revoked_at = datetime.now(UTC)
    return key
