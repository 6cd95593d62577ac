"""Copy an uploaded file part to the scratch folder (the caller removes it)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi import UploadFile

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
