"""Learnware packages: the zip format, its manifest, and reading an untrusted upload safely.

A package is a zip holding ``learnware.yaml`` (the :class:`Manifest`) and the model in one
of the formats the dock runs without executing uploaded code:

- ``peft-lora``: ``adapter/adapter_config.json`` + ``adapter/adapter_model.safetensors``,
  a LoRA adapter over a registered base, read with the label-name head;
- ``hf-seqcls``: ``model/config.json`` + ``model/model.safetensors`` + tokenizer files, a
  transformers sequence-classification directory (built-in architectures only);
- ``onnx``: ``model.onnx``, run with onnxruntime (scikit-learn and other frameworks);
- ``pooled-linear``: ``linear/linear.safetensors``, one d × d map applied to a registered base's
  mean-pooled embeddings, read with the label-name head (what a UTD transfer yields).

Optionally it declares ``inputs`` (a JSONL file of ``{"text": ...}``: the inputs the model is
run on to fit its spec) and ``spec`` (the stem of a developer-computed PAVE spec, as written
by ``PaveSpec.save``). :func:`extract_package` refuses zip bombs, path tricks, links,
pickles, code and native binaries, then extracts into a temporary folder, checks what the
files name and declare (``package_content``: paths inside JSON, safetensors headers, ONNX
domains) and renames it, so a refused package leaves nothing behind.

This module imports no torch or transformers: the API can validate uploads cheaply.
"""

from __future__ import annotations

import json
import os
import pickletools
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.ml.bases import registered_bases
from app.ml.errors import InvalidPackage, UnsafePackage
from app.ml.jsonl import JsonlError, parse_jsonl
from app.ml.package_content import (
    REMOTE_CODE_KEYS,
    check_package_content,
    is_peft_class_hint,
    unsafe_path_reason,
)

ModelFormat = Literal["peft-lora", "hf-seqcls", "onnx", "pooled-linear"]
# Formats that run over a registered base named by the manifest's base_model.
BASE_FORMATS: tuple[ModelFormat, ...] = ("peft-lora", "pooled-linear")
MANIFEST_NAME = "learnware.yaml"

# Files each format needs; a tuple inside a tuple means "one of these".
REQUIRED_FILES: dict[ModelFormat, tuple[str | tuple[str, ...], ...]] = {
    "peft-lora": ("adapter/adapter_config.json", "adapter/adapter_model.safetensors"),
    "hf-seqcls": (
        "model/config.json",
        ("model/model.safetensors", "model/model.safetensors.index.json"),
        (
            "model/tokenizer.json",
            "model/vocab.txt",
            "model/vocab.json",
            "model/spiece.model",
            "model/sentencepiece.bpe.model",
        ),
    ),
    "onnx": ("model.onnx",),
    "pooled-linear": ("linear/linear.safetensors",),
}

# Pickles (torch .bin/.pt checkpoints are pickles too), code and native binaries.
FORBIDDEN_SUFFIXES = frozenset(
    {
        ".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".joblib", ".npz", ".h5", ".keras",
        ".py", ".pyc", ".pyo", ".pyw", ".pyd", ".pyx", ".ipynb", ".sh", ".bash", ".bat", ".cmd",
        ".ps1", ".so", ".dll", ".dylib", ".exe", ".jar", ".class",
    }
)  # fmt: skip

# Keys of transformers / peft configs that make a loader import code shipped with the model.

# Content signatures refused whatever the file is called.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x7fELF", "an ELF native binary"),
    (b"MZ", "a Windows executable"),
    (b"\xfe\xed\xfa\xce", "a Mach-O binary"),
    (b"\xfe\xed\xfa\xcf", "a Mach-O binary"),
    (b"\xce\xfa\xed\xfe", "a Mach-O binary"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O binary"),
    (b"\xca\xfe\xba\xbe", "a Mach-O universal binary or Java class"),
    (b"#!", "a script (shebang line)"),
    (b"PK\x03\x04", "a nested zip archive (torch checkpoints and .npz are zips of pickles)"),
)
# Protocol 0/1 pickles have no header; most start by importing a callable (GLOBAL opcode).
_PICKLE_GLOBAL = re.compile(rb"^[(\]}]*c[A-Za-z_][\w.]*\n[A-Za-z_][\w.]*\n")
# PROTO, then a real opcode: a safetensors header length such as 0x0380 starts "\x80\x03\x00".
_PICKLE_OPCODES = frozenset(op.code.encode("latin-1")[0] for op in pickletools.opcodes)
_NPY_MAGIC = b"\x93NUMPY"
_SAFETENSORS_MAX_HEADER = 100 << 20
_CHUNK = 1 << 20
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class PackageLimits:
    """What an uploaded package may contain; anything beyond is refused as unsafe."""

    max_total_bytes: int = 1024**3
    """Sum of uncompressed member sizes, declared and counted while extracting."""
    max_members: int = 2000
    max_ratio: float = 100.0
    """Largest uncompressed/compressed ratio of one member (checked above ``ratio_min_bytes``)."""
    ratio_min_bytes: int = 1 << 20
    max_total_ratio: float = 20.0
    """Largest ratio of the whole package's uncompressed to compressed bytes (checked above
    ``total_ratio_min_bytes``): weights barely compress, so many members that each stay under
    ``max_ratio`` but add up to far more than the upload are a bomb spread thin."""
    total_ratio_min_bytes: int = 64 << 20
    max_manifest_bytes: int = 64 * 1024
    max_inputs: int = 10_000
    max_input_chars: int = 100_000


class Manifest(BaseModel):
    """``learnware.yaml``: what the learnware is, how to run it, and under which licence."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), str_strip_whitespace=True)

    name: str = Field(min_length=1, max_length=128)
    description: str = Field(default="", max_length=10_000)
    tags: list[str] = Field(default_factory=list, max_length=64)
    task_type: Literal["text-classification"] = "text-classification"
    label_names: list[str] = Field(max_length=10_000)
    model_format: ModelFormat
    base_model: str | None = Field(default=None, min_length=1, max_length=256)
    """The registered base a ``peft-lora`` adapter or ``pooled-linear`` map applies to (informational otherwise)."""
    license: str = Field(min_length=1, max_length=256)
    inputs: str | None = None
    """Path in the zip of a JSONL file ``{"text": ...}`` per line: inputs to run the model on."""
    spec: str | None = None
    """Stem path in the zip of a developer-computed spec (``<stem>.safetensors`` + ``<stem>.json``)."""

    @field_validator("label_names")
    @classmethod
    def _labels(cls, names: list[str]) -> list[str]:
        names = [n.strip() for n in names]
        if len(names) < 2:
            raise ValueError(f"need at least two label names, got {names}")
        if any(not n for n in names):
            raise ValueError("label names must be non-empty")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate label names: {duplicates}")
        return names

    @field_validator("inputs", "spec")
    @classmethod
    def _member_path(cls, value: str | None) -> str | None:
        if value is not None:
            reason = unsafe_path_reason(value)
            if reason:
                raise ValueError(f"path {value!r} {reason}")
        return value

    @model_validator(mode="after")
    def _base_for_lora(self) -> Manifest:
        if self.model_format in BASE_FORMATS and not self.base_model:
            what = "adapter" if self.model_format == "peft-lora" else "linear map"
            raise ValueError(f"base_model is required for a {self.model_format} {what}")
        return self

    def spec_files(self) -> tuple[str, str] | None:
        """The archive names of the declared spec's tensor and metadata files."""
        if self.spec is None:
            return None
        stem = PurePosixPath(self.spec)
        return str(stem.with_suffix(".safetensors")), str(stem.with_suffix(".json"))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(exclude_none=True), sort_keys=False, allow_unicode=True)


MODEL_PATHS: dict[ModelFormat, str] = {
    "peft-lora": "adapter",
    "hf-seqcls": "model",
    "onnx": "model.onnx",
    "pooled-linear": "linear",
}


@dataclass(frozen=True)
class LearnwarePackage:
    """An extracted, checked package: its manifest, its folder and its declared inputs."""

    manifest: Manifest
    root: Path
    inputs: list[str]

    @property
    def model_path(self) -> Path:
        """The adapter folder, the transformers folder, the ONNX file or the linear map's folder."""
        return self.root / MODEL_PATHS[self.manifest.model_format]

    @property
    def spec_stem(self) -> Path | None:
        """Where a developer-computed spec lies (for ``PaveSpec.load``), if the package has one."""
        return None if self.manifest.spec is None else self.root / self.manifest.spec


def _format_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "manifest"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse_manifest(text: bytes | str) -> Manifest:
    """Validate YAML manifest text; InvalidPackage names the bad field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidPackage(f"{MANIFEST_NAME} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidPackage(f"{MANIFEST_NAME} must be a mapping of fields, got {type(data).__name__}")
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise InvalidPackage(f"invalid {MANIFEST_NAME}: {_format_validation(exc)}") from exc


def read_manifest(source: bytes | str | Path, limits: PackageLimits | None = None) -> Manifest:
    """Read a manifest from YAML bytes, a ``learnware.yaml`` file or a package zip (str = a path)."""
    limits = limits or PackageLimits()
    if isinstance(source, bytes):
        if len(source) > limits.max_manifest_bytes:
            raise InvalidPackage(f"{MANIFEST_NAME} is {len(source)} bytes, over {limits.max_manifest_bytes}")
        return parse_manifest(source)
    path = Path(source)
    if zipfile.is_zipfile(path):
        with _open_zip(path) as zf:
            return _manifest_from_zip(zf, limits)
    if path.stat().st_size > limits.max_manifest_bytes:
        raise InvalidPackage(f"{path.name} is over {limits.max_manifest_bytes} bytes")
    return parse_manifest(path.read_bytes())


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise InvalidPackage(f"{path.name} is not a zip archive: {exc}") from exc


def _manifest_from_zip(zf: zipfile.ZipFile, limits: PackageLimits) -> Manifest:
    try:
        info = zf.getinfo(MANIFEST_NAME)
    except KeyError:
        nested = [n for n in zf.namelist() if n.endswith("/" + MANIFEST_NAME)]
        hint = f" (found {nested[0]!r}: zip the folder's contents, not the folder)" if nested else ""
        raise InvalidPackage(f"no {MANIFEST_NAME} at the root of the package{hint}") from None
    if info.file_size > limits.max_manifest_bytes:
        raise InvalidPackage(f"{MANIFEST_NAME} is {info.file_size} bytes, over {limits.max_manifest_bytes}")
    with zf.open(info) as fh:
        return parse_manifest(fh.read(limits.max_manifest_bytes + 1))


def _check_members(infos: list[zipfile.ZipInfo], limits: PackageLimits) -> None:
    """Refuse from the central directory alone: count, names, entry types, declared sizes."""
    if len(infos) > limits.max_members:
        raise UnsafePackage(f"package has {len(infos)} members, over the limit of {limits.max_members}")
    seen: set[str] = set()
    total = compressed = 0
    for info in infos:
        name = info.filename
        reason = unsafe_path_reason(name)
        if reason:
            raise UnsafePackage(f"unsafe path {name!r}: it {reason}")
        key = name.rstrip("/")
        if key in seen:
            raise UnsafePackage(f"member {key!r} appears twice")
        seen.add(key)
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind == stat.S_IFLNK:
            raise UnsafePackage(f"member {name!r} is a symbolic link")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafePackage(f"member {name!r} is not a regular file (mode {oct(mode)})")
        if info.flag_bits & 0x1:
            raise InvalidPackage(f"member {name!r} is encrypted")
        if info.is_dir():
            continue
        suffix = PurePosixPath(name).suffix.lower()
        if suffix in FORBIDDEN_SUFFIXES:
            raise UnsafePackage(
                f"member {name!r}: {suffix} files (pickles, code, native binaries) are refused; "
                "use safetensors, a transformers directory or ONNX"
            )
        total += info.file_size
        compressed += info.compress_size
        if total > limits.max_total_bytes:
            raise UnsafePackage(
                f"package uncompresses to over {limits.max_total_bytes} bytes (zip bomb?) at {name!r}"
            )
        if info.file_size > limits.ratio_min_bytes:
            ratio = info.file_size / max(info.compress_size, 1)
            if ratio > limits.max_ratio:
                raise UnsafePackage(
                    f"member {name!r} compresses {ratio:.0f}:1, over the limit of "
                    f"{limits.max_ratio:.0f}:1 (zip bomb?)"
                )
    if total > limits.total_ratio_min_bytes and total > limits.max_total_ratio * max(compressed, 1):
        raise UnsafePackage(
            f"package uncompresses {total / max(compressed, 1):.0f}:1 ({total} bytes from {compressed}), "
            f"over the limit of {limits.max_total_ratio:.0f}:1 for the whole package (zip bomb?)"
        )


def _has(names: set[str], want: str | tuple[str, ...]) -> bool:
    return any(w in names for w in ((want,) if isinstance(want, str) else want))


def check_layout(manifest: Manifest, names: Iterable[str]) -> None:
    """Refuse a package that lacks its format's files, its declared inputs or its declared spec."""
    present = set(names)
    for want in REQUIRED_FILES[manifest.model_format]:
        if not _has(present, want):
            label = want if isinstance(want, str) else " or ".join(want)
            raise InvalidPackage(f"a {manifest.model_format} package needs {label}")
    if manifest.inputs is not None and manifest.inputs not in present:
        raise InvalidPackage(f"declared inputs file {manifest.inputs!r} is not in the package")
    spec_files = manifest.spec_files()
    if spec_files:
        for name in spec_files:
            if name not in present:
                raise InvalidPackage(f"declared spec {manifest.spec!r} lacks {name!r}")


def _check_base(manifest: Manifest) -> None:
    if manifest.model_format not in BASE_FORMATS:
        return
    known = registered_bases()
    if manifest.base_model not in known:
        raise InvalidPackage(
            f"base_model {manifest.base_model!r} is not a registered base; known: {', '.join(known)}"
        )


def content_threat(head: bytes) -> str | None:
    """What the first bytes of a file reveal it to be, if it is something the dock refuses."""
    if len(head) >= 3 and head[0] == 0x80 and 2 <= head[1] <= 5 and head[2] in _PICKLE_OPCODES:
        return f"a pickle (protocol {head[1]})"
    if _PICKLE_GLOBAL.match(head):
        return "a pickle (protocol 0/1)"
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    return None


def _check_safetensors_head(head: bytes, name: str) -> None:
    """A safetensors file: an 8-byte little-endian header length, then a JSON header."""
    size = int.from_bytes(head[:8], "little") if len(head) >= 8 else 0
    if not 2 <= size <= _SAFETENSORS_MAX_HEADER or head[8:9] != b"{":
        raise InvalidPackage(f"member {name!r} is not a safetensors file")


def _extract_member(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, limits: PackageLimits, written: int
) -> int:
    """Stream one member to ``target``, counting bytes against its declared size and the total."""
    count = 0
    with zf.open(info) as src, target.open("xb") as dst:
        while chunk := src.read(_CHUNK):
            if count == 0:
                if info.filename.endswith(".safetensors"):
                    _check_safetensors_head(chunk, info.filename)
                else:
                    threat = content_threat(chunk[:64])
                    if threat:
                        raise UnsafePackage(f"member {info.filename!r} is {threat}")
            count += len(chunk)
            if count > info.file_size:
                raise UnsafePackage(
                    f"member {info.filename!r} is larger than the {info.file_size} it declares"
                )
            if written + count > limits.max_total_bytes:
                raise UnsafePackage(
                    f"package uncompresses to over {limits.max_total_bytes} bytes (zip bomb?)"
                )
            dst.write(chunk)
    if count != info.file_size:
        raise InvalidPackage(
            f"member {info.filename!r} holds {count} bytes, not the {info.file_size} declared"
        )
    return written + count


def _walk_keys(data: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield str(key), value
            yield from _walk_keys(value)
    elif isinstance(data, list):
        for item in data:
            yield from _walk_keys(item)


def _check_file(path: Path, name: str) -> None:
    """Content checks after extraction: configs that load remote code, object arrays."""
    if name.endswith("config.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidPackage(f"{name} is not valid JSON: {exc}") from exc
        for key, value in _walk_keys(data):
            if (
                key in REMOTE_CODE_KEYS
                and value not in (None, False, {}, [])
                and not is_peft_class_hint(key, value)
            ):
                raise UnsafePackage(f"{name} sets {key!r}: the dock never runs code shipped with a model")
    with path.open("rb") as fh:
        if fh.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
            fh.seek(0)
            try:
                version = np.lib.format.read_magic(fh)
                header = (
                    np.lib.format.read_array_header_1_0(fh)
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0(fh)
                )
            except ValueError as exc:
                raise InvalidPackage(f"{name} is a malformed .npy file: {exc}") from exc
            if header[2].hasobject:
                raise UnsafePackage(f"{name} is a numpy array of Python objects (loading it unpickles)")


def read_inputs(data: bytes, name: str, limits: PackageLimits) -> list[str]:
    """The declared inputs: one ``{"text": "..."}`` object per non-empty line (``app.ml.jsonl``)."""
    texts: list[str] = []
    try:
        rows = list(parse_jsonl(data, f"inputs file {name!r}"))
    except JsonlError as exc:
        raise InvalidPackage(str(exc)) from exc
    for number, row in rows:
        text = row.get("text") if isinstance(row, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise InvalidPackage(f'inputs file {name!r} line {number} has no non-empty "text" string')
        if len(text) > limits.max_input_chars:
            raise InvalidPackage(
                f"inputs file {name!r} line {number} has {len(text)} characters, over {limits.max_input_chars}"
            )
        texts.append(text)
        if len(texts) > limits.max_inputs:
            raise InvalidPackage(f"inputs file {name!r} has over {limits.max_inputs} inputs")
    if not texts:
        raise InvalidPackage(f"inputs file {name!r} holds no inputs")
    return texts


def extract_package(
    zip_path: Path | str, dest_dir: Path | str, limits: PackageLimits | None = None
) -> LearnwarePackage:
    """Check and extract an untrusted package to ``dest_dir`` (absent or empty).

    Raises InvalidPackage (malformed) or UnsafePackage (refused on safety grounds) with the
    reason; on any error ``dest_dir`` is left as it was and no partial files remain.
    """
    limits = limits or PackageLimits()
    zip_path, dest = Path(zip_path), Path(dest_dir)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"destination {dest} exists and is not an empty folder")
    with _open_zip(zip_path) as zf:
        infos = zf.infolist()
        _check_members(infos, limits)
        manifest = _manifest_from_zip(zf, limits)
        names = [i.filename for i in infos if not i.is_dir()]
        check_layout(manifest, names)
        _check_base(manifest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
        try:
            written = 0
            for info in infos:
                target = tmp.joinpath(*info.filename.rstrip("/").split("/"))
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                written = _extract_member(zf, info, target, limits, written)
                _check_file(target, info.filename)
            inputs = (
                read_inputs((tmp / manifest.inputs).read_bytes(), manifest.inputs, limits)
                if manifest.inputs
                else []
            )
            check_package_content(tmp, manifest.model_format, len(manifest.label_names))
            tmp.replace(dest)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise InvalidPackage(f"corrupt package: {exc}") from exc
        except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise InvalidPackage(f"conflicting paths in the package: {exc}") from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return LearnwarePackage(manifest=manifest, root=dest, inputs=inputs)


def read_package_inputs(zip_path: Path | str, limits: PackageLimits | None = None) -> list[str]:
    """The declared inputs of a package zip, read from their one member without unpacking the
    model: for a stage that needs only the texts (the spec fit, after validation extracted and
    checked the whole package)."""
    limits = limits or PackageLimits()
    with _open_zip(Path(zip_path)) as zf:
        _check_members(zf.infolist(), limits)
        manifest = _manifest_from_zip(zf, limits)
        if manifest.inputs is None:
            return []
        try:
            data = zf.read(manifest.inputs)
        except KeyError:
            raise InvalidPackage(f"declared inputs file {manifest.inputs!r} is not in the package") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            raise InvalidPackage(f"corrupt package: {exc}") from exc
    return read_inputs(data, manifest.inputs, limits)


def inputs_jsonl(texts: Iterable[str]) -> bytes:
    """Encode declared inputs as JSONL (one ``{"text": ...}`` per line)."""
    return "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts).encode("utf-8")


def files_under(folder: Path, prefix: str) -> dict[str, Path]:
    """Every regular file below ``folder``, keyed by its archive name under ``prefix``."""
    folder = Path(folder)
    return {
        f"{prefix.rstrip('/')}/{p.relative_to(folder).as_posix()}": p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def build_package(out_zip: Path | str, manifest: Manifest, files: Mapping[str, Path | bytes]) -> Path:
    """Write a package zip (deterministic bytes: sorted members, fixed timestamps).

    Refuses archive names the dock would refuse and a layout the manifest's format lacks.
    """
    out = Path(out_zip)
    if MANIFEST_NAME in files:
        raise InvalidPackage(f"{MANIFEST_NAME} is written from the manifest; do not pass it in files")
    for name in files:
        reason = unsafe_path_reason(name)
        if reason:
            raise UnsafePackage(f"unsafe path {name!r}: it {reason}")
        suffix = PurePosixPath(name).suffix.lower()
        if suffix in FORBIDDEN_SUFFIXES:
            raise UnsafePackage(f"member {name!r}: {suffix} files are refused")
    check_layout(manifest, files)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            entries: list[tuple[str, Path | bytes]] = [(MANIFEST_NAME, manifest.to_yaml().encode())]
            entries += sorted(files.items())
            for name, content in entries:
                info = zipfile.ZipInfo(name, date_time=_FIXED_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                if isinstance(content, bytes):
                    zf.writestr(info, content)
                else:
                    info.file_size = Path(content).stat().st_size
                    with Path(content).open("rb") as src, zf.open(info, "w") as dst:
                        shutil.copyfileobj(src, dst, _CHUNK)
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
