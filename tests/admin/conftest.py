"""Admin dashboard tests on the API's real migrated databases (SQLite, and PostgreSQL when
PAVEDOCK_TEST_POSTGRES_URL is set), with jobs and learnwares put in place through the service
layer the workers use."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import select

from app.db.base import utcnow
from app.db.models import ApiKey, Job, Learnware, LearnwareStatus, SpecKind, SpecSource
from app.jobs import service as jobs
from app.jobs.stages import REBUILD_INDEX, Stage
from app.learnwares.service import spec_row
from app.runtime import Runtime

STALE_AFTER = timedelta(minutes=10)


@pytest.fixture(autouse=True)
def _quick_admin_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sample request metrics every 0.2 s and keep Flower's default link."""
    monkeypatch.setenv("PAVEDOCK_ADMIN_SAMPLE_INTERVAL_S", "0.2")
    monkeypatch.delenv("PAVEDOCK_FLOWER_URL", raising=False)


def running_job(
    runtime: Runtime,
    *,
    worker: str,
    progress: float,
    message: str,
    stage: Stage = REBUILD_INDEX,
    beat_age: timedelta = timedelta(0),
) -> int:
    """A job a worker claimed and reports progress on, as ``app.jobs.runner`` does."""
    with runtime.db.session() as session:
        job = jobs.create_job(
            session,
            kind=stage.name,
            first_stage=stage,
            owner=None,
            max_attempts=3,
            space_id=runtime.default_space_id,
        )
        claim = jobs.claim(session, job.id, stage.name, worker, STALE_AFTER)
        assert claim is not None
        jobs.heartbeat(session, claim, progress=progress, message=message)
        if beat_age:
            row = session.get(Job, job.id)
            assert row is not None
            row.heartbeat_at = utcnow() - beat_age
        return job.id


def failed_job(runtime: Runtime, *, worker: str, reason: str, stage: Stage = REBUILD_INDEX) -> int:
    """A job whose run failed with ``reason`` (the worker recorded it through ``jobs.fail``)."""
    with runtime.db.session() as session:
        job = jobs.create_job(
            session,
            kind=stage.name,
            first_stage=stage,
            owner=None,
            max_attempts=3,
            space_id=runtime.default_space_id,
        )
        claim = jobs.claim(session, job.id, stage.name, worker, STALE_AFTER)
        assert claim is not None
        assert jobs.fail(session, job.id, claim.attempt, reason, rejected=False)
        return job.id


def learnware_awaiting_review(runtime: Runtime, space: tuple[str, int], owner_prefix: str, name: str) -> int:
    """A learnware whose spec is fitted and which waits for an admin (what ``fit_spec`` leaves
    when review is required)."""
    space_id, dim = space
    vector = np.sign(np.random.default_rng(len(name)).standard_normal(dim)).astype(np.float32)
    with runtime.db.session() as session:
        owner = session.scalars(select(ApiKey).where(ApiKey.prefix == owner_prefix)).one()
        spec = spec_row(space_id, vector, kind=SpecKind.model, source=SpecSource.uploaded, meta={})
        session.add(spec)
        session.flush()
        learnware = Learnware(
            owner_id=owner.id,
            status=LearnwareStatus.awaiting_review,
            name=name,
            description="waits for review",
            tags=[],
            task_type="text-classification",
            label_names=["negative", "positive"],
            model_format="onnx",
            manifest={},
            package_sha256="0" * 64,
            package_size=0,
            space_id=space_id,
            uploaded_spec_id=spec.id,
            spec_id=spec.id,
            spec_recomputed=False,
            validation_log=["kept the developer's spec"],
        )
        session.add(learnware)
        session.flush()
        return learnware.id


def key_prefix(token: str) -> str:
    return token.split("_")[1]
