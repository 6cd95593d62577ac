"""The jobs table as the truth: guarded claims, heartbeats, the reaper, cancel and retry, the
progress stream. Worker-side functions are called directly on the real database."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from app.db.base import utcnow
from app.db.models import Job, JobState, Learnware, LearnwareStatus
from app.jobs import service
from app.jobs.endpoints import poll_interval
from app.jobs.service import JobLost
from app.runtime import Runtime
from tests.fixtures.service import Keys, broker_messages

STALE = timedelta(seconds=30)


@pytest.fixture
def queued(client: TestClient, keys: Keys, tfidf_packages: dict) -> dict:  # type: ignore[type-arg]
    response = client.post(
        "/v1/learnwares",
        headers=keys.auth("developer"),
        files={"package": ("p.zip", tfidf_packages["sst2"].read_bytes(), "application/zip")},
    )
    assert response.status_code == 202
    return dict(response.json())


def test_a_job_is_claimed_once(runtime: Runtime, queued: dict) -> None:  # type: ignore[type-arg]
    with runtime.db.session() as session:
        first = service.claim(session, queued["job_id"], "learnware.validate", "w1", STALE)
    with runtime.db.session() as session:
        again = service.claim(session, queued["job_id"], "learnware.validate", "w2", STALE)
        wrong_stage = service.claim(session, queued["job_id"], "learnware.spec", "w2", STALE)
    assert first is not None and first.attempt == 1
    assert again is None and wrong_stage is None
    with runtime.db.session() as session:
        job = session.get(Job, queued["job_id"])
        assert job is not None and job.state == JobState.running and job.worker == "w1"


def test_a_dead_workers_job_is_requeued_then_failed_at_max_attempts(runtime: Runtime, queued: dict) -> None:  # type: ignore[type-arg]
    job_id = queued["job_id"]
    sent_before = broker_messages(runtime)
    for attempt in (1, 2, 3):
        with runtime.db.session() as session:
            claim = service.claim(session, job_id, "learnware.validate", f"w{attempt}", STALE)
            assert claim is not None and claim.attempt == attempt
            job = session.get(Job, job_id)
            assert job is not None
            job.heartbeat_at = utcnow() - timedelta(minutes=5)  # the worker died long ago
        with runtime.db.session() as session:
            report = service.reap(session, stale_after=STALE, redispatch_after=timedelta(hours=1))
        if attempt < 3:
            assert report.requeued == [job_id]
            # The old run lost its claim: its heartbeat and writes are refused.
            with runtime.db.session() as session, pytest.raises(JobLost):
                service.heartbeat(session, claim)
        else:
            assert report.failed == [job_id]
    assert broker_messages(runtime) == sent_before + 2
    with runtime.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.state == JobState.failed
        assert (
            job.error is not None
            and "lost during learnware.validate" in job.error
            and "3 attempts" in job.error
        )
        learnware = session.get(Learnware, queued["learnware_id"])
        assert learnware is not None and learnware.status == LearnwareStatus.failed
        assert learnware.status_reason == job.error


def test_a_redelivered_message_takes_over_a_stale_job(runtime: Runtime, queued: dict) -> None:  # type: ignore[type-arg]
    with runtime.db.session() as session:
        old = service.claim(session, queued["job_id"], "learnware.validate", "dead", STALE)
        job = session.get(Job, queued["job_id"])
        assert job is not None and old is not None
        job.heartbeat_at = utcnow() - timedelta(minutes=5)
    with runtime.db.session() as session:
        new = service.claim(session, queued["job_id"], "learnware.validate", "alive", STALE)
    assert new is not None and new.attempt == 2
    with runtime.db.session() as session:
        assert service.fail(session, queued["job_id"], old.attempt, "late write", rejected=False) is False
        service.succeed(session, new, result={"ok": True}, message="done")
    with runtime.db.session() as session:
        job = session.get(Job, queued["job_id"])
        assert job is not None and job.state == JobState.succeeded and job.error is None


def test_a_queued_job_is_sent_again_only_when_its_message_was_lost(runtime: Runtime, queued: dict) -> None:  # type: ignore[type-arg]
    from app.jobs.reaper import reap_once

    runtime.settings.job_redispatch_after_s = 60
    with runtime.db.session() as session:
        job = session.get(Job, queued["job_id"])
        assert job is not None
        job.dispatched_at = utcnow() - timedelta(hours=2)
    # Its message still waits in the broker: the queue is only backlogged.
    assert broker_messages(runtime) == 1
    assert reap_once(runtime).redispatched == []
    # The broker lost it: the reaper sends it again.
    for message in (runtime.settings.broker_dir / "queue").iterdir():
        message.unlink()
    assert reap_once(runtime).redispatched == [queued["job_id"]]
    assert broker_messages(runtime) == 1


def test_nothing_is_sent_when_the_transaction_rolls_back(runtime: Runtime, queued: dict) -> None:  # type: ignore[type-arg]
    from app.jobs.stages import REBUILD_INDEX

    before = broker_messages(runtime)
    with pytest.raises(RuntimeError), runtime.db.session() as session:
        service.create_job(
            session, kind="index.rebuild", first_stage=REBUILD_INDEX, owner=None, max_attempts=3
        )
        raise RuntimeError("abort")
    assert broker_messages(runtime) == before


def test_cancel_and_retry(client: TestClient, keys: Keys, runtime: Runtime, queued: dict) -> None:  # type: ignore[type-arg]
    job_id = queued["job_id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth("developer2")).status_code == 403
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth("developer"))
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    again = client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.auth("developer"))
    assert again.status_code == 409 and "already cancelled" in again.json()["error"]["message"]
    before = broker_messages(runtime)
    retried = client.post(f"/v1/admin/jobs/{job_id}/retry", headers=keys.auth("admin"))
    assert (
        retried.status_code == 200 and retried.json()["state"] == "queued" and retried.json()["attempts"] == 0
    )
    assert broker_messages(runtime) == before + 1
    lw = client.get(f"/v1/learnwares/{queued['learnware_id']}", headers=keys.auth("developer")).json()
    assert lw["status"] == "pending"
    listed = client.get("/v1/admin/jobs", headers=keys.auth("admin"), params={"state": "queued"}).json()
    assert [j["id"] for j in listed["items"]] == [job_id]


def test_the_progress_stream_reports_until_the_job_ends(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    queued: dict,  # type: ignore[type-arg]
) -> None:
    with runtime.db.session() as session:
        claim = service.claim(session, queued["job_id"], "learnware.validate", "w", STALE)
        assert claim is not None
        service.heartbeat(session, claim, progress=0.5, message="half way")
        service.succeed(session, claim, result={"answer": 42}, message="done")
    with client.stream(
        "GET", f"/v1/jobs/{queued['job_id']}/events", headers=keys.auth("developer")
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    event = json.loads(lines[-1][5:])
    assert event["state"] == "succeeded" and event["result"] == {"answer": 42} and event["progress"] == 1.0
    assert client.get(f"/v1/jobs/{queued['job_id']}/events", headers=keys.auth("user")).status_code == 403


def test_the_event_stream_reads_a_short_job_often_and_a_long_one_twice_a_second() -> None:
    waits = [poll_interval(t) for t in (0.0, 1.0, 5.0, 10.0, 60.0, 600.0)]
    assert waits[0] == pytest.approx(0.1)
    assert waits == sorted(waits)  # never faster as the job goes on
    assert waits[-1] == waits[-2] == waits[-3] == pytest.approx(0.5)
