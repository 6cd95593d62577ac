"""Read a safetensors header without loading a tensor, and refuse one that lies.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the data. The Rust loader computes element counts in 64-bit
integers, so a declared shape such as ``[2**32, 2**32]`` wraps to 0 elements and an absurd
tensor looks consistent; here every count is a Python int, bounded, and the byte ranges must
tile the data exactly, as the loader requires. Nothing is allocated before the header passes.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from app.ml.errors import DockError, InvalidPackage

# Bits per element of each dtype safetensors knows (sub-byte floats pack several per byte).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip
MAX_HEADER_BYTES = 100 << 20
MAX_ELEMENTS = 1 << 48
"""No real tensor has this many elements; a larger declared count is a lie about the data."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as the header declares it."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int
    """Byte range in the data section (after the header)."""


@dataclass(frozen=True)
class SafetensorsHeader:
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    data_start: int
    """Offset of the data section in the file: 8 + the header length."""


def _entry(name: str, what: str, raw: object, error: type[DockError]) -> TensorEntry:
    if not isinstance(raw, dict) or set(raw) != {"dtype", "shape", "data_offsets"}:
        raise error(f"{what}: tensor {name!r} must declare exactly dtype, shape and data_offsets")
    dtype, shape, offsets = raw["dtype"], raw["shape"], raw["data_offsets"]
    if dtype not in DTYPE_BITS:
        raise error(f"{what}: tensor {name!r} has an unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise error(f"{what}: tensor {name!r} has a bad shape {shape!r} (a list of non-negative integers)")
    if any(s > MAX_ELEMENTS for s in shape) or math.prod(shape) > MAX_ELEMENTS:
        raise error(
            f"{what}: tensor {name!r} declares shape {shape}, {math.prod(shape)} elements: "
            f"over the limit of {MAX_ELEMENTS}"
        )
    if not (
        isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)
    ):
        raise error(f"{what}: tensor {name!r} has bad data_offsets {offsets!r}")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or offsets[1] - offsets[0] != bits // 8:
        raise error(
            f"{what}: tensor {name!r} of shape {shape} and dtype {dtype} needs {bits / 8:g} bytes, "
            f"its data_offsets {offsets} give {offsets[1] - offsets[0]}"
        )
    return TensorEntry(dtype=dtype, shape=tuple(shape), begin=offsets[0], end=offsets[1])


def read_safetensors_header(
    path: Path, what: str | None = None, *, error: type[DockError] = InvalidPackage
) -> SafetensorsHeader:
    """The checked header of the safetensors file at ``path``; ``error`` (named by ``what``) says
    what is wrong: a bad length, bad JSON, an unknown dtype, a shape its bytes do not hold, byte
    ranges that overlap, leave gaps or run past the end of the file."""
    what = what or Path(path).name
    size = Path(path).stat().st_size
    with Path(path).open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise error(f"{what} is not safetensors: shorter than its header length")
        (length,) = struct.unpack("<Q", head)
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            raise error(f"{what} is not safetensors: header length {length} for {size} bytes")
        text = fh.read(length)
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise error(f"{what} is not safetensors: its header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise error(f"{what} is not safetensors: its header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise error(f"{what}: __metadata__ must map names to strings")
    tensors = {str(name): _entry(str(name), what, raw, error) for name, raw in header.items()}
    data_bytes = size - 8 - length
    position = 0
    for name, entry in sorted(tensors.items(), key=lambda item: (item[1].begin, item[1].end)):
        if entry.begin != position:
            raise error(
                f"{what}: tensor {name!r} starts at byte {entry.begin}, not {position} "
                "(tensor data must follow each other without gaps or overlaps)"
            )
        position = entry.end
    if position != data_bytes:
        raise error(f"{what}: its tensors cover {position} bytes of data, the file holds {data_bytes}")
    return SafetensorsHeader(tensors=tensors, metadata=dict(metadata), data_start=8 + length)
