"""What the overview says about queues, workers, jobs, indexes and the review queue, checked
against the database and the embedded broker the jobs were really published to."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.db.models import JobState, Learnware, LearnwareStatus
from app.jobs import service as jobs_service
from app.jobs.stages import FIT_TASK_SPEC, REBUILD_INDEX
from app.runtime import Runtime
from tests.admin.conftest import failed_job, key_prefix, learnware_awaiting_review, running_job
from tests.fixtures.service import Keys


def overview(client: TestClient, keys: Keys) -> dict[str, Any]:
    response = client.get("/v1/admin/overview", headers=keys.auth("admin"))
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_an_empty_dock(client: TestClient, keys: Keys, space: tuple[str, int]) -> None:
    body = overview(client, keys)
    assert [(q["name"], q["broker_messages"], q["queued_jobs"]) for q in body["queues"]] == [
        ("gpu", 0, 0),
        ("cpu", 0, 0),
    ]
    assert body["broker_error"] is None
    assert set(body["job_counts"].values()) == {0}
    assert body["workers"]["workers"] == []
    assert body["awaiting_review"] == 0
    assert body["flower_url"] == "http://127.0.0.1:5555"
    [index] = body["indexes"]
    assert index["space_id"] == space[0] and index["dim"] == space[1]
    assert index["indexed"] == 0 and index["ready_learnwares"] == 0 and index["error"] is None


def test_queued_jobs_are_counted_in_the_database_and_the_broker(
    client: TestClient, keys: Keys, space: tuple[str, int]
) -> None:
    for _ in range(2):
        response = client.post(f"/v1/admin/spec-spaces/{space[0]}/rebuild", headers=keys.auth("admin"))
        assert response.status_code == 202
    queues = {q["name"]: q for q in overview(client, keys)["queues"]}
    assert queues["cpu"]["broker_messages"] == 2 and queues["cpu"]["queued_jobs"] == 2
    assert queues["cpu"]["oldest_queued_s"] is not None and queues["cpu"]["oldest_queued_s"] >= 0
    assert queues["gpu"]["broker_messages"] == 0 and queues["gpu"]["queued_jobs"] == 0


def test_running_jobs_show_their_worker_and_progress(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    busy = running_job(
        runtime, worker="gpu@host-a", progress=0.42, message="fitting the spec", stage=FIT_TASK_SPEC
    )
    lost = running_job(
        runtime, worker="cpu@host-b", progress=0.1, message="rebuilding", beat_age=timedelta(minutes=5)
    )
    body = overview(client, keys)
    assert body["job_counts"]["running"] == 2
    workers = {w["name"]: w for w in body["workers"]["workers"]}
    assert workers["gpu@host-a"]["status"] == "busy" and not workers["gpu@host-a"]["answered"]
    [job] = workers["gpu@host-a"]["jobs"]
    assert (job["id"], job["progress"], job["stage"], job["stale"]) == (busy, 0.42, "task.fit", False)
    assert workers["cpu@host-b"]["status"] == "stale"
    assert workers["cpu@host-b"]["jobs"][0]["id"] == lost
    queues = {q["name"]: q for q in body["queues"]}
    assert queues["gpu"]["running_jobs"] == 1 and queues["cpu"]["running_jobs"] == 1


def test_a_failed_job_keeps_its_reason_and_retry_sends_it_again(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    job_id = failed_job(runtime, worker="cpu@host-c", reason="index file unreadable: disk full")
    body = overview(client, keys)
    assert body["job_counts"]["failed"] == 1
    before = {q["name"]: q["broker_messages"] for q in body["queues"]}
    listed = client.get("/v1/admin/jobs?state=failed", headers=keys.auth("admin")).json()
    assert [(j["id"], j["error"]) for j in listed["items"]] == [(job_id, "index file unreadable: disk full")]
    retried = client.post(f"/v1/admin/jobs/{job_id}/retry", headers=keys.auth("admin"))
    assert retried.status_code == 200 and retried.json()["state"] == JobState.queued.value
    after = overview(client, keys)
    assert after["job_counts"]["failed"] == 0 and after["job_counts"]["queued"] == 1
    assert {q["name"]: q["broker_messages"] for q in after["queues"]}["cpu"] == before["cpu"] + 1


def test_the_review_queue_and_index_sizes(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    first = learnware_awaiting_review(runtime, space, key_prefix(keys.developer), "first")
    learnware_awaiting_review(runtime, space, key_prefix(keys.developer), "second")
    body = overview(client, keys)
    assert body["awaiting_review"] == 2
    assert body["indexes"][0]["awaiting_review"] == 2 and body["indexes"][0]["indexed"] == 0
    approved = client.post(f"/v1/admin/learnwares/{first}/approve", headers=keys.auth("admin"))
    assert approved.status_code == 200 and approved.json()["status"] == "ready"
    body = overview(client, keys)
    assert body["awaiting_review"] == 1
    [index] = body["indexes"]
    assert (index["indexed"], index["ready_learnwares"], index["awaiting_review"]) == (1, 1, 1)
    with runtime.db.session() as session:
        learnware = session.get(Learnware, first)
        assert learnware is not None and learnware.status == LearnwareStatus.ready


def test_flower_link_comes_from_settings(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime, keys: Keys, client: TestClient
) -> None:
    from app.main import create_app

    settings = runtime.settings
    monkeypatch.setattr(
        runtime, "settings", settings.model_copy(update={"flower_url": "https://flower.example"})
    )
    with TestClient(create_app(runtime=runtime)) as other:
        assert overview(other, keys)["flower_url"] == "https://flower.example"
    monkeypatch.setattr(runtime, "settings", settings.model_copy(update={"flower_url": ""}))
    with TestClient(create_app(runtime=runtime)) as other:
        assert overview(other, keys)["flower_url"] is None


def test_workers_that_answer_are_online_with_what_they_say_they_run(
    runtime: Runtime, client: TestClient
) -> None:
    from app.admin.monitor import WorkerReport
    from app.admin.service import workers
    from app.db.base import utcnow

    beating = running_job(runtime, worker="cpu@a", progress=0.5, message="half way")
    with runtime.db.session() as session:
        queued = jobs_service.create_job(
            session, kind="index.rebuild", first_stage=REBUILD_INDEX, owner=None, max_attempts=3
        ).id
    report = WorkerReport(at=utcnow(), active={"cpu@a": [beating], "gpu@b": [queued], "idle@c": []})
    with runtime.db.session() as session:
        found = {w.name: w for w in workers(session, report, stale_after_s=60).workers}
    assert {name: w.status for name, w in found.items()} == {
        "cpu@a": "online",
        "gpu@b": "online",
        "idle@c": "online",
    }
    assert [j.id for j in found["cpu@a"].jobs] == [beating]
    assert [j.id for j in found["gpu@b"].jobs] == [queued]  # taken from the broker, not yet claimed
    assert found["idle@c"].jobs == [] and found["idle@c"].last_seen == report.at
