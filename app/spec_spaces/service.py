"""Register the configured spec spaces, describe them, and check specs against them.

A space's id is cheap to compute (its config and the sha256 of the base's weights); loading it
(the base model with LoRA) is needed only to register it the first time and to fit specs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.models import Spec, SpecSpaceRecord
from app.errors import IncompatibleSpec, NotFound
from app.ml.bases import resolve_base
from app.ml.binary_index import (
    FLOAT32,
    SIGN_BITS,
    encoding_of_config,
    is_sign_vector,
    packed_len,
    unpack_signs,
)
from app.ml.encoders import weights_sha256
from app.ml.pave import UploadedSpec
from app.ml.spec_space import SpecSpaceConfig, check_vector, config_dict, load_space, space_id
from app.settings import Settings


def configured_space_id(config: SpecSpaceConfig) -> str:
    """The id of a configured space without loading its model."""
    return space_id(config, weights_sha256(resolve_base(config.base)))


def default_space_id(settings: Settings) -> str:
    return configured_space_id(settings.space_configs[0])


def register_spaces(session: Session, settings: Settings) -> list[SpecSpaceRecord]:
    """Make sure every configured space has its row (loading a space only when it is new).

    Safe when several processes start at once on a fresh database (two API workers): the row is
    inserted only if absent (a concurrent insert of the same space wins and this one does
    nothing), then read back; the space's id is its content, so both processes mean one row."""
    records = []
    for config in settings.space_configs:
        sid = configured_space_id(config)
        record = session.get(SpecSpaceRecord, sid)
        if record is None:
            space = load_space(config)
            _insert_if_absent(
                session,
                {
                    "id": space.id,
                    "dim": space.dim,
                    "config": config_dict(config),
                    "description": space.describe(),
                },
            )
            record = session.get(SpecSpaceRecord, sid, populate_existing=True)
            if record is None:  # pragma: no cover - the insert or a concurrent one made it
                raise RuntimeError(f"spec space {sid} was not registered")
        records.append(record)
    return records


def _insert_if_absent(session: Session, values: dict[str, Any]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING on PostgreSQL and SQLite; elsewhere an insert in a
    savepoint whose unique violation means another process registered the space first."""
    values = {**values, "index_version": 0, "created_at": utcnow()}
    dialect = session.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        statement = insert(SpecSpaceRecord).values(**values).on_conflict_do_nothing(index_elements=["id"])
        session.execute(statement)
        return
    try:
        with session.begin_nested():
            session.add(SpecSpaceRecord(**values))
    except IntegrityError:
        pass


def get_space(session: Session, sid: str) -> SpecSpaceRecord:
    record = session.get(SpecSpaceRecord, sid)
    if record is None:
        raise NotFound(f"no spec space {sid}")
    return record


def space_for_spec(session: Session, claimed: str | None, default_id: str) -> SpecSpaceRecord:
    """The registered space a spec claims (the default if it claims none); IncompatibleSpec for a
    space this dock does not serve."""
    record = session.get(SpecSpaceRecord, claimed or default_id)
    if record is None:
        served = ", ".join(r.id for r in list_spaces(session))
        raise IncompatibleSpec(f"spec is of space {claimed}, not {default_id}: this dock serves {served}")
    return record


def list_spaces(session: Session) -> Sequence[SpecSpaceRecord]:
    return session.scalars(select(SpecSpaceRecord).order_by(SpecSpaceRecord.created_at)).all()


def space_encoding(record: SpecSpaceRecord) -> str:
    """How the space's specs are stored and indexed: "sign-bits" or "float32"."""
    return encoding_of_config(record.config)


def stored_encoding(session: Session, spec_id: int | None) -> str | None:
    """The form a stored spec is in ("sign-bits" or "float32"), told by its length."""
    if spec_id is None:
        return None
    spec = session.get(Spec, spec_id)
    if spec is None:
        return None
    return SIGN_BITS if len(spec.vector) == packed_len(spec.dim) else FLOAT32


def check_spec(vector: np.ndarray, record: SpecSpaceRecord, claimed_space: str | None) -> np.ndarray:
    """``check_vector`` against the registered space (no model loaded); in a space of sign specs,
    also one with values other than ±1. Packed bits (uint8, as ``read_spec_file`` returns a U8
    tensor) are taken by a sign space alone, and unpacked."""
    if claimed_space is not None and claimed_space != record.id:
        raise IncompatibleSpec(f"spec is of space {claimed_space}, not {record.id}")
    encoding = space_encoding(record)
    arr = np.asarray(vector)
    if arr.dtype == np.uint8:
        nbytes = packed_len(record.dim)
        if encoding != SIGN_BITS:
            raise IncompatibleSpec(
                f"spec is packed sign bits, but space {record.id} holds {encoding} specs: send its F32 values"
            )
        if arr.ndim != 1 or arr.shape[0] != nbytes:
            raise IncompatibleSpec(
                f"packed spec has shape {tuple(arr.shape)}, space {record.id} needs ({nbytes},) bytes "
                f"({record.dim} signs)"
            )
        spare = 8 * nbytes - record.dim
        if spare and arr[-1] & ((1 << spare) - 1):
            raise IncompatibleSpec(f"packed spec has bits set beyond its {record.dim} signs")
        return unpack_signs(arr, record.dim)
    checked = check_vector(arr, record, claimed_space)
    if encoding == SIGN_BITS and not is_sign_vector(checked):
        raise IncompatibleSpec(
            f"space {record.id} holds sign specs: every value must be +1 or -1 (or send them packed, "
            f"a U8 tensor of {packed_len(record.dim)} bytes)"
        )
    return checked


def check_uploaded(
    session: Session, uploaded: UploadedSpec, default_id: str
) -> tuple[SpecSpaceRecord, np.ndarray]:
    """The registered space an uploaded spec claims (the default if none) and its checked vector."""
    record = space_for_spec(session, uploaded.space_id, default_id)
    return record, check_spec(uploaded.vector, record, uploaded.space_id)
