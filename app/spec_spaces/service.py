"""Register the configured spec spaces, describe them, and check specs against them.

A space's id is cheap to compute (its config and the sha256 of the base's weights); loading it
(the base model with LoRA) is needed only to register it the first time and to fit specs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.errors import NotFound
from app.db.models import SpecSpaceRecord
from app.ml.encoders import resolve_base, weights_sha256
from app.ml.errors import IncompatibleSpec
from app.ml.safetensors_header import read_safetensors_header
from app.ml.spec_space import SpecSpaceConfig, config_dict, load_space, space_id
from app.settings import Settings


def configured_space_id(config: SpecSpaceConfig) -> str:
    """The id of a configured space without loading its model."""
    return space_id(config, weights_sha256(resolve_base(config.base)))


def default_space_id(settings: Settings) -> str:
    return configured_space_id(settings.space_configs[0])


def register_spaces(session: Session, settings: Settings) -> list[SpecSpaceRecord]:
    """Make sure every configured space has its row (loading a space only when it is new)."""
    records = []
    for config in settings.space_configs:
        sid = configured_space_id(config)
        record = session.get(SpecSpaceRecord, sid)
        if record is None:
            space = load_space(config)
            record = SpecSpaceRecord(
                id=space.id, dim=space.dim, config=config_dict(config), description=space.describe()
            )
            session.add(record)
            session.flush()
        records.append(record)
    return records


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


def check_spec(vector: np.ndarray, record: SpecSpaceRecord, claimed_space: str | None) -> np.ndarray:
    """Refuse a spec of another space, of the wrong shape, or with non-finite or zero values
    (the same rules as ``app.ml.spec_space.check_vector``, against the registered space)."""
    if claimed_space is not None and claimed_space != record.id:
        raise IncompatibleSpec(f"spec is of space {claimed_space}, not {record.id}")
    arr = np.asarray(vector)
    if arr.ndim != 1 or arr.shape[0] != record.dim:
        raise IncompatibleSpec(f"spec has shape {tuple(arr.shape)}, space {record.id} needs ({record.dim},)")
    if not np.all(np.isfinite(arr)):
        raise IncompatibleSpec("spec has NaN or infinite values")
    if not np.any(arr):
        raise IncompatibleSpec("spec is all zeros")
    return arr.astype(np.float32)


@dataclass(frozen=True)
class UploadedSpec:
    space_id: str | None
    vector: np.ndarray
    meta: dict[str, str]


def read_spec_file(path: Path) -> UploadedSpec:
    """Read a spec written by ``PaveSpec.save`` (``<stem>.safetensors``: tensor ``pave``, the space
    id in its metadata). The header is parsed and checked here (declared shape against its bytes,
    in overflow-free arithmetic) before a byte of the tensor is read, never by a pickle."""
    header = read_safetensors_header(path, "spec file", error=IncompatibleSpec)
    tensor = header.tensors.get("pave")
    if tensor is None:
        raise IncompatibleSpec("spec file holds no 'pave' tensor")
    if tensor.dtype != "F32":
        raise IncompatibleSpec(f"spec tensor has dtype {tensor.dtype}, not F32")
    with Path(path).open("rb") as fh:
        fh.seek(header.data_start + tensor.begin)
        raw = fh.read(tensor.end - tensor.begin)
    vector = np.frombuffer(raw, dtype="<f4").reshape(tensor.shape).astype(np.float32)
    meta = header.metadata
    claimed = meta.get("space_id")
    return UploadedSpec(
        space_id=str(claimed) if claimed else None,
        vector=vector,
        meta={str(k): str(v) for k, v in meta.items()},
    )
