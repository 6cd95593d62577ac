"""Spec space endpoints: everything a client needs to compute a compatible spec locally."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import RuntimeDep, SessionDep
from app.api.responses import errors
from app.api.types import PathText
from app.auth.dependencies import CurrentKey
from app.spec_spaces import service
from app.spec_spaces.schemas import SpecSpaceRead

router = APIRouter(responses=errors(401), tags=["spec spaces"])


def _read(runtime: RuntimeDep, record_id: str, session: SessionDep) -> SpecSpaceRead:
    record = service.get_space(session, record_id)
    live = runtime.indexes.loaded_info(record.id)
    return SpecSpaceRead(
        id=record.id,
        dim=record.dim,
        default=record.id == runtime.default_space_id,
        config=record.config,
        description=record.description,
        index_version=record.index_version,
        indexed=live.size if live else None,
        encoding=service.space_encoding(record),
    )


@router.get("/v1/spec-spaces", response_model=list[SpecSpaceRead])
def list_spec_spaces(_key: CurrentKey, runtime: RuntimeDep, session: SessionDep) -> list[SpecSpaceRead]:
    """The spec spaces this dock serves (the first is the default)."""
    return [_read(runtime, r.id, session) for r in service.list_spaces(session)]


@router.get("/v1/spec-spaces/{space_id}", responses=errors(404, 422), response_model=SpecSpaceRead)
def get_spec_space(
    space_id: PathText, _key: CurrentKey, runtime: RuntimeDep, session: SessionDep
) -> SpecSpaceRead:
    """One spec space: its config, base hash, LoRA layers and their shapes, its index."""
    return _read(runtime, space_id, session)
