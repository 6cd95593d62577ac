"""Register the configured spec spaces, describe them, and check specs against them.

A space's id is cheap to compute (its config and the sha256 of the base's weights); loading it
(the base model with LoRA) is needed only to register it the first time and to fit specs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.errors import NotFound
from app.db.models import Spec, SpecSpaceRecord
from app.ml.binary_index import (
    FLOAT32,
    SIGN_BITS,
    encoding_of_config,
    is_sign_vector,
    packed_len,
    unpack_signs,
)
from app.ml.encoders import resolve_base, weights_sha256
from app.ml.errors import IncompatibleSpec
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
    """Refuse a spec of another space, of the wrong shape, or with non-finite or zero values
    (the same rules as ``app.ml.spec_space.check_vector``, against the registered space); in a
    space of sign specs, also one with values other than ±1. Packed bits (uint8, as
    ``read_spec_file`` returns a U8 tensor) are taken by a sign space alone, and unpacked."""
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
    if arr.ndim != 1 or arr.shape[0] != record.dim:
        raise IncompatibleSpec(f"spec has shape {tuple(arr.shape)}, space {record.id} needs ({record.dim},)")
    if not np.all(np.isfinite(arr)):
        raise IncompatibleSpec("spec has NaN or infinite values")
    if not np.any(arr):
        raise IncompatibleSpec("spec is all zeros")
    if encoding == SIGN_BITS and not is_sign_vector(arr):
        raise IncompatibleSpec(
            f"space {record.id} holds sign specs: every value must be +1 or -1 (or send them packed, "
            f"a U8 tensor of {packed_len(record.dim)} bytes)"
        )
    return arr.astype(np.float32)


@dataclass(frozen=True)
class UploadedSpec:
    space_id: str | None
    vector: np.ndarray
    """float32 values, or uint8 packed sign bits (``encoding`` says which)."""
    meta: dict[str, str]
    encoding: str = FLOAT32


_MAX_HEADER = 1 << 20


def read_spec_file(path: Path) -> UploadedSpec:
    """Read a spec written by ``PaveSpec.save`` (``<stem>.safetensors``: tensor ``pave``, the space
    id in its metadata). The header is parsed here with bounds checks, never by a pickle."""
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise IncompatibleSpec("spec file is not safetensors: shorter than its header length")
    (header_len,) = struct.unpack("<Q", raw[:8])
    if header_len > min(_MAX_HEADER, len(raw) - 8):
        raise IncompatibleSpec("spec file is not safetensors: bad header length")
    try:
        header = json.loads(raw[8 : 8 + header_len])
    except ValueError as exc:
        raise IncompatibleSpec(f"spec file is not safetensors: {exc}") from exc
    if not isinstance(header, dict):
        raise IncompatibleSpec("spec file is not safetensors: header is not an object")
    meta = header.get("__metadata__") or {}
    tensor = header.get("pave")
    if not isinstance(tensor, dict):
        raise IncompatibleSpec("spec file holds no 'pave' tensor")
    dtype, shape, offsets = tensor.get("dtype"), tensor.get("shape"), tensor.get("data_offsets")
    if dtype not in ("F32", "U8"):
        raise IncompatibleSpec(f"spec tensor has dtype {dtype}: F32 values, or U8 packed sign bits")
    if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise IncompatibleSpec(f"spec tensor has a bad shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise IncompatibleSpec("spec tensor has bad data offsets")
    start, end = 8 + header_len + offsets[0], 8 + header_len + offsets[1]
    count = int(np.prod(shape)) if shape else 1
    width = 4 if dtype == "F32" else 1
    if not (8 + header_len <= start <= end <= len(raw)) or end - start != width * count:
        raise IncompatibleSpec("spec tensor data does not match its shape")
    vector: np.ndarray
    if dtype == "F32":
        vector = np.frombuffer(raw[start:end], dtype="<f4").reshape(shape).astype(np.float32)
    else:
        vector = np.frombuffer(raw[start:end], dtype=np.uint8).reshape(shape).copy()
    claimed = meta.get("space_id") if isinstance(meta, dict) else None
    return UploadedSpec(
        space_id=str(claimed) if claimed else None,
        vector=vector,
        meta={str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {},
        encoding=FLOAT32 if dtype == "F32" else SIGN_BITS,
    )
