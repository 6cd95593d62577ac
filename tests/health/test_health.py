"""Probes, metrics and the OpenAPI document."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.runtime import Runtime
from tests.fixtures.service import Keys, script_head


def test_liveness_and_readiness(client: TestClient, runtime: Runtime) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    checks = ready.json()["checks"]
    assert all(checks[name]["ok"] for name in ("database", "broker", "store", "index"))
    assert checks["database"]["revision"] == script_head(runtime.settings.resolved_database_url)


def test_metrics_cover_requests_jobs_queues_and_the_index(client: TestClient, keys: Keys) -> None:
    client.post(
        "/v1/tasks",
        headers=keys.auth("user"),
        json={"texts": ["a b", "c d"], "labels": [0, 1], "label_names": ["x", "y"]},
    )
    client.get("/v1/learnwares/77", headers=keys.auth("user"))
    text = client.get("/metrics").text
    assert (
        'pavedock_http_requests_total{method="GET",route="/v1/learnwares/{learnware_id}",status="404"}'
        in text
    )
    assert 'pavedock_jobs{kind="task.identify",state="queued"} 1.0' in text
    assert 'pavedock_queue_depth{queue="gpu"} 1.0' in text
    assert "pavedock_index_size{" in text and "pavedock_index_version{" in text
    assert "pavedock_http_request_duration_seconds_bucket" in text


def test_openapi_documents_the_versioned_api(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/v1/learnwares",
        "/v1/learnwares/{learnware_id}/package",
        "/v1/tasks",
        "/v1/tasks/{task_id}",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/events",
        "/v1/spec-spaces",
        "/v1/identify",
    ):
        assert path in paths, path
    upload = paths["/v1/learnwares"]["post"]
    assert upload["summary"] and "multipart/form-data" in upload["requestBody"]["content"]
    assert paths["/v1/learnwares"]["post"]["responses"].keys() >= {"202"}


def test_unknown_routes_keep_the_error_body(client: TestClient) -> None:
    response = client.get("/v2/nothing")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Not Found"}}
