"""A learnware's weights fingerprint: the same model under another name, owner or zip is the
same fingerprint (a ``pooled-linear`` map counts with the base it maps).

It hashes what the model computes with, not the package bytes: for safetensors the tensors
(name, dtype, shape, data), sorted by name, so the file's metadata header, tensor order,
sharding and the zip's compression do not count; for ONNX the graph with its names and
producer fields cleared, so a re-export under another graph name is the same model. The
manifest (name, description, licence, label names) and the declared inputs are left out.

Imports no torch: the API computes it while checking an upload.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from app.ml.errors import InvalidPackage
from app.ml.packages import LearnwarePackage

_CHUNK = 1 << 20
_HEADER_MAX = 100 << 20


def _hash_safetensors(path: Path, into: dict[str, tuple[str, list[int], str]]) -> None:
    """Hash each tensor of a safetensors file (streamed), keyed by its name."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise InvalidPackage(f"{path.name} is not a safetensors file")
        (size,) = struct.unpack("<Q", raw)
        if not 2 <= size <= _HEADER_MAX:
            raise InvalidPackage(f"{path.name} is not a safetensors file")
        try:
            header = json.loads(fh.read(size))
        except ValueError as exc:
            raise InvalidPackage(f"{path.name} has a malformed safetensors header: {exc}") from exc
        start = 8 + size
        header.pop("__metadata__", None)
        for name, entry in header.items():
            if not isinstance(entry, dict) or "data_offsets" not in entry:
                raise InvalidPackage(f"{path.name}: tensor {name!r} has no data offsets")
            begin, end = (int(v) for v in entry["data_offsets"])
            if name in into:
                raise InvalidPackage(f"tensor {name!r} appears in two weight files")
            digest = hashlib.sha256()
            fh.seek(start + begin)
            left = end - begin
            while left > 0:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    raise InvalidPackage(f"{path.name}: tensor {name!r} runs past the end of the file")
                digest.update(chunk)
                left -= len(chunk)
            into[name] = (
                str(entry.get("dtype")),
                [int(d) for d in entry.get("shape", [])],
                digest.hexdigest(),
            )


def _onnx_digest(path: Path) -> str:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    model.graph.name = ""
    model.doc_string = ""
    model.graph.doc_string = ""
    model.producer_name = ""
    model.producer_version = ""
    model.domain = ""
    model.model_version = 0
    del model.metadata_props[:]
    return hashlib.sha256(b"onnx\0" + model.SerializeToString(deterministic=True)).hexdigest()


def weights_fingerprint(package: LearnwarePackage) -> str:
    """sha256 (hex) over the model's weights, independent of names, metadata and packaging."""
    fmt = package.manifest.model_format
    if fmt == "onnx":
        return _onnx_digest(package.model_path)
    tensors: dict[str, tuple[str, list[int], str]] = {}
    for path in sorted(package.model_path.glob("*.safetensors")):
        _hash_safetensors(path, tensors)
    if not tensors:
        raise InvalidPackage(f"the {fmt} package has no safetensors weights")
    digest = hashlib.sha256(fmt.encode() + b"\0")
    if fmt == "pooled-linear":
        # A d × d map means nothing without the base it maps: the same numbers over another
        # base of that width are another model.
        digest.update(str(package.manifest.base_model).encode() + b"\0")
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        digest.update(json.dumps([name, dtype, shape, data]).encode())
    return digest.hexdigest()
