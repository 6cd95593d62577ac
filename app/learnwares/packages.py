"""Stored learnware packages, opened for the domains that run them (the learnware pipeline, the
task's shot check): fetched from the store and extracted, checked again, into scratch."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.ml.packages import LearnwarePackage, extract_package
from app.runtime import Runtime


@contextmanager
def scratch_folder(runtime: Runtime, *, label: str) -> Iterator[Path]:
    """A fresh folder under the scratch dir named after ``label`` (a job), removed when the block ends."""
    settings = runtime.settings
    settings.scratch_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=settings.scratch_dir))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def extracted(runtime: Runtime, sha256: str, *, label: str) -> Iterator[LearnwarePackage]:
    """The stored package ``sha256`` fetched and extracted (checked again) into a scratch folder
    named after ``label`` (a job), removed when the block ends."""
    with scratch_folder(runtime, label=label) as scratch:
        zip_path = runtime.store.fetch(sha256, scratch / "package.zip")
        yield extract_package(zip_path, scratch / "package", runtime.settings.package_limits())
