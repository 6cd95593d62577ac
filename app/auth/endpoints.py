"""Key endpoints: who am I; admins issue, list and revoke keys."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter

from app.api.deps import SessionDep
from app.api.responses import errors
from app.api.types import PathId
from app.auth import repository, service
from app.auth.dependencies import AdminKey, CurrentKey
from app.auth.schemas import KeyCreate, KeyIssued, KeyRead

router = APIRouter(responses=errors(401), tags=["keys"])


@router.get("/v1/keys/me", response_model=KeyRead)
def read_own_key(key: CurrentKey) -> KeyRead:
    """The key this request is made with."""
    return KeyRead.model_validate(key)


@router.post("/v1/admin/keys", responses=errors(403, 422), response_model=KeyIssued, status_code=201)
def create_key(body: KeyCreate, admin: AdminKey, session: SessionDep) -> KeyIssued:
    """Issue a key with a role (admin only); the token is in this response and nowhere else."""
    expires = timedelta(days=body.expires_in_days) if body.expires_in_days else None
    issued = service.create_key(session, role=body.role, name=body.name, expires_in=expires, created_by=admin)
    return KeyIssued.model_validate(
        {**KeyRead.model_validate(issued.key).model_dump(), "token": issued.token}
    )


@router.get("/v1/admin/keys", responses=errors(403), response_model=list[KeyRead])
def list_keys(_admin: AdminKey, session: SessionDep) -> list[KeyRead]:
    """Every key (prefixes and metadata, never secrets); admin only."""
    return [KeyRead.model_validate(k) for k in repository.list_keys(session)]


@router.delete("/v1/admin/keys/{key_id}", responses=errors(403, 404, 422), response_model=KeyRead)
def revoke_key(key_id: PathId, _admin: AdminKey, session: SessionDep) -> KeyRead:
    """Revoke a key (admin only); requests with it get 401 from now on."""
    return KeyRead.model_validate(service.revoke_key(session, key_id))
