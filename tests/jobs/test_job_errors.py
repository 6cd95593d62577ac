"""A job fails with words a developer can act on: a model that passed the request's checks but
does not load in the worker rejects its learnware with what failed and what to do, and an error
the dock did not anticipate says it is the dock's, never a bare "internal error: TypeError"."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import update

from app.db.models import Job, JobState, Learnware, LearnwareStatus
from app.jobs.runner import JobContext, run_stage
from app.jobs.stages import VALIDATE_LEARNWARE
from app.learnwares import pipeline
from app.runtime import Runtime
from tests.fixtures.service import Keys, submit


def submitted(client: TestClient, keys: Keys, package: Path) -> tuple[int, int]:
    response = submit(client, keys, package)
    assert response.status_code == 202, response.text
    return int(response.json()["learnware_id"]), int(response.json()["job_id"])


def test_a_model_that_does_not_load_in_the_worker_is_rejected_with_what_to_fix(
    client: TestClient, keys: Keys, runtime: Runtime, lora_packages: dict[str, Path]
) -> None:
    learnware_id, job_id = submitted(client, keys, lora_packages["sst2"])
    # The stored adapter's config gives its rank as a word: peft cannot build the adapter.
    out = io.BytesIO()
    with zipfile.ZipFile(lora_packages["sst2"]) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("adapter_config.json"):
                data = json.dumps({**json.loads(data), "r": "eight"}).encode()
            dst.writestr(info, data)
    sha = runtime.store.put_bytes(out.getvalue())
    with runtime.db.session() as session:
        session.execute(update(Learnware).where(Learnware.id == learnware_id).values(package_sha256=sha))

    assert run_stage(runtime, job_id, VALIDATE_LEARNWARE, pipeline.validate, worker="w1") == "failed"
    with runtime.db.session() as session:
        job = session.get(Job, job_id)
        learnware = session.get(Learnware, learnware_id)
        assert job is not None and learnware is not None
        assert job.state == JobState.failed and job.error is not None
        assert "internal error" not in job.error and "the dock failed" not in job.error, job.error
        assert job.error.startswith("loading the peft-lora model from the package failed: "), job.error
        assert "submit it again" in job.error
        assert learnware.status == LearnwareStatus.rejected and learnware.status_reason == job.error


def test_an_error_the_dock_did_not_anticipate_says_so_and_what_was_being_done(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    learnware_id, job_id = submitted(client, keys, tfidf_packages["trec"])

    def broken(ctx: JobContext) -> None:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")

    assert run_stage(runtime, job_id, VALIDATE_LEARNWARE, broken, worker="w1") == "failed"
    with runtime.db.session() as session:
        job = session.get(Job, job_id)
        learnware = session.get(Learnware, learnware_id)
        assert job is not None and job.error is not None and learnware is not None
        assert not job.error.startswith("internal error")
        assert job.error.startswith("the dock failed while the worker was to check the package"), job.error
        assert "TypeError" in job.error and "report it with the job id" in job.error
        # Not the developer's fault: the learnware failed, it was not rejected.
        assert learnware.status == LearnwareStatus.failed
