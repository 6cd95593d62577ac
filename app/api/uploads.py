"""Uploaded file parts copied to the scratch folder, bounded in size and removed afterwards;
``SpecFile`` / ``OptionalSpecFile``: the one dependency of the endpoints that take a spec."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

from fastapi import Depends, File, UploadFile

from app.api.deps import RuntimeDep
from app.errors import PayloadTooLarge

_CHUNK = 1 << 20


@contextmanager
def saved_upload(
    upload: UploadFile | None, scratch: Path, *, max_bytes: int, what: str, filename: str
) -> Iterator[Path | None]:
    """The upload as ``filename`` in a fresh scratch folder (None if absent), refused past
    ``max_bytes``; removed afterwards. Error messages name ``filename``, not a temp name."""
    if upload is None:
        yield None
        return
    scratch.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="upload-", dir=scratch))
    path = folder / filename
    try:
        size = 0
        with path.open("wb") as out:
            upload.file.seek(0)
            while chunk := upload.file.read(_CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise PayloadTooLarge(f"{what} is over the limit of {max_bytes} bytes")
                out.write(chunk)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_SPEC_HELP = "a spec computed locally (PaveSpec.save's .safetensors file)"


def _spec_file(runtime: RuntimeDep, spec: UploadFile | None) -> Iterator[Path | None]:
    settings = runtime.settings
    with saved_upload(
        spec,
        settings.scratch_dir,
        max_bytes=settings.max_spec_upload_bytes,
        what="spec",
        filename="spec.safetensors",
    ) as path:
        yield path


def spec_file(
    runtime: RuntimeDep, spec: Annotated[UploadFile, File(description=_SPEC_HELP)]
) -> Iterator[Path]:
    """The uploaded ``spec`` part as a file, for the request's duration."""
    for path in _spec_file(runtime, spec):
        assert path is not None
        yield path


def optional_spec_file(
    runtime: RuntimeDep,
    spec: Annotated[UploadFile | None, File(description=f"optional: {_SPEC_HELP}")] = None,
) -> Iterator[Path | None]:
    """The uploaded ``spec`` part as a file, or None when the request has none."""
    yield from _spec_file(runtime, spec)


SpecFile = Annotated[Path, Depends(spec_file, scope="function")]
OptionalSpecFile = Annotated[Path | None, Depends(optional_spec_file, scope="function")]
