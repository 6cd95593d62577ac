"""A package is unpacked once per stage at most (issue 14): once in the request that checks it,
once by the validation stage that runs it, and not at all by the spec stage, which reads its
inputs member alone. Counted in bytes written by the extractor itself."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.jobs.runner import run_stage
from app.jobs.stages import FIT_LEARNWARE_SPEC, VALIDATE_LEARNWARE
from app.learnwares import pipeline
from app.ml import packages
from app.runtime import Runtime
from tests.fixtures.service import Keys, submit


def test_a_package_is_unpacked_once_per_stage_at_most(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    tfidf_packages: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = tfidf_packages["sst2"]
    with zipfile.ZipFile(package) as zf:
        size = sum(info.file_size for info in zf.infolist())
    written: list[int] = []
    extract_member = packages._extract_member

    def counted(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, limits, total: int) -> int:  # type: ignore[no-untyped-def]
        after = extract_member(zf, info, target, limits, total)
        written.append(after - total)
        return after

    monkeypatch.setattr(packages, "_extract_member", counted)

    response = submit(client, keys, package)
    assert response.status_code == 202, response.text
    job_id = int(response.json()["job_id"])
    assert sum(written) == size  # the request: once
    written.clear()
    assert run_stage(runtime, job_id, VALIDATE_LEARNWARE, pipeline.validate, worker="test") == "done"
    assert sum(written) == size  # validation: once
    written.clear()
    assert run_stage(runtime, job_id, FIT_LEARNWARE_SPEC, pipeline.fit_spec, worker="test") == "done"
    assert written == []  # the spec fit: only the inputs member is read, nothing unpacked
