"""The OpenAPI document says what each route answers when it refuses: its error responses, all
with the dock's one error body, and the bounds its parameters and bodies enforce."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.types import MAX_ID

PUBLIC = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics")}
# What each route answers beyond 401 (and 422 where it takes input): read from its service.
EXPECTED: dict[tuple[str, str], set[int]] = {
    ("post", "/v1/learnwares"): {403, 409, 413},
    ("get", "/v1/learnwares/{learnware_id}"): {404},
    ("delete", "/v1/learnwares/{learnware_id}"): {403, 404},
    ("get", "/v1/learnwares/{learnware_id}/package"): {404},
    ("post", "/v1/admin/learnwares/{learnware_id}/approve"): {403, 404, 409},
    ("post", "/v1/admin/learnwares/{learnware_id}/reject"): {403, 404, 409},
    ("post", "/v1/tasks/spec"): {413},
    ("get", "/v1/tasks/{task_id}"): {403, 404},
    ("post", "/v1/identify"): {413},
    ("post", "/v1/merges"): {403, 404, 409},
    ("post", "/v1/finetunes"): {403, 404, 409},
    ("post", "/v1/transfers"): {403, 404, 409},
    ("post", "/v1/tasks/{task_id}/reuse"): {403, 404, 409},
    ("get", "/v1/jobs/{job_id}"): {403, 404},
    ("get", "/v1/jobs/{job_id}/events"): {403, 404},
    ("post", "/v1/jobs/{job_id}/cancel"): {403, 404, 409},
    ("get", "/v1/admin/jobs"): {403},
    ("post", "/v1/admin/jobs/{job_id}/retry"): {403, 404, 409},
    ("post", "/v1/admin/spec-spaces/{space_id}/rebuild"): {403, 404},
    ("get", "/v1/spec-spaces/{space_id}"): {404},
    ("get", "/v1/admin/keys"): {403},
    ("post", "/v1/admin/keys"): {403},
    ("delete", "/v1/admin/keys/{key_id}"): {403, 404},
    ("get", "/v1/admin/overview"): {403},
    ("get", "/v1/admin/charts"): {403},
}


@pytest.fixture
def openapi(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, ops in document["paths"].items()
        for method, op in ops.items()
        if path.startswith("/v1/") or path in {"/healthz", "/readyz", "/metrics"}
    ]


def test_every_route_lists_its_error_responses_with_the_error_body(openapi: dict[str, Any]) -> None:
    for method, path, op in operations(openapi):
        responses = op["responses"]
        errors = {int(status) for status in responses if status.startswith(("4", "5"))}
        expected = set(EXPECTED.get((method, path), set()))
        if (method, path) not in PUBLIC:
            expected.add(401)
        if op.get("parameters") or op.get("requestBody"):
            expected.add(422)
        assert expected <= errors, (
            f"{method.upper()} {path} documents {sorted(errors)}, not {sorted(expected)}"
        )
        for status in errors:
            schema = responses[str(status)]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status, schema)
    body = openapi["components"]["schemas"]["ErrorBody"]
    assert body["required"] == ["error"]
    assert {"code", "message"} <= set(openapi["components"]["schemas"]["ErrorDetail"]["required"])
    assert "HTTPValidationError" not in openapi["components"]["schemas"]  # not the body we send


def test_the_constraints_routes_enforce_are_in_the_document(openapi: dict[str, Any]) -> None:
    schemas = openapi["components"]["schemas"]
    task = schemas["TaskCreate"]["properties"]
    assert task["label_names"]["minItems"] == 2  # a task needs two labels
    assert task["texts"]["minItems"] == 2 and task["texts"]["maxItems"] == 5000
    assert task["texts"]["items"]["pattern"] == "^[^\\u0000]*$"
    assert task["top_k"]["minimum"] == 1 and task["top_k"]["maximum"] == 100
    key = schemas["KeyCreate"]["properties"]
    assert key["name"]["maxLength"] == 100
    assert key["expires_in_days"]["anyOf"][0]["maximum"] == 36500
    for _method, path, op in operations(openapi):
        for param in op.get("parameters", []):
            if (
                param["name"].endswith("_id")
                and param["in"] == "path"
                and param["schema"]["type"] == "integer"
            ):
                assert param["schema"]["minimum"] == 1 and param["schema"]["maximum"] == MAX_ID, (path, param)
            if param["name"] == "page":
                assert param["schema"]["minimum"] == 1 and "maximum" in param["schema"], path


def test_every_keyed_route_says_how_to_authenticate(openapi: dict[str, Any]) -> None:
    """A key in either header, or a browser's session cookie (how the admin dashboard calls)."""
    from app.web.session import COOKIE, CSRF_HEADER

    schemes = openapi["components"]["securitySchemes"]
    assert schemes["APIKeyCookie"]["in"] == "cookie" and schemes["APIKeyCookie"]["name"] == COOKIE
    assert CSRF_HEADER in schemes["APIKeyCookie"]["description"]
    assert (schemes["APIKeyHeader"]["name"], schemes["HTTPBearer"]["scheme"]) == ("X-API-Key", "bearer")
    for method, path, op in operations(openapi):
        if (method, path) in PUBLIC:
            continue
        assert op["security"] == [{"HTTPBearer": []}, {"APIKeyHeader": []}, {"APIKeyCookie": []}], path
