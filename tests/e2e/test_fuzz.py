"""A bounded property-based fuzz of the whole OpenAPI against a real API process: schemathesis
generates requests from each route's schema (valid ones and ones that break it) and sends them
to uvicorn on a real database (PostgreSQL when PAVEDOCK_TEST_POSTGRES_URL is set, SQLite
otherwise), once with an admin key and once with a user key (whose requests meet the role
checks); no request may get a server error, and every status answered must be one the document
lists. PAVEDOCK_FUZZ_EXAMPLES bounds the examples per route (default 25);
the counts are printed at the end (docs/benchmarks/reliability.md)."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.db.migrate import upgrade
from tests.e2e.conftest import TEST_ENV, free_port, uvicorn_proc, wait_ready
from tests.e2e.test_production_stack import make_key

# A hard import, not importorskip: schemathesis is a dev dependency, and CI must fail, not skip
# the fuzz, when it is missing.
pytestmark = pytest.mark.e2e

POSTGRES_URL = os.environ.get("PAVEDOCK_TEST_POSTGRES_URL")
EXAMPLES = int(os.environ.get("PAVEDOCK_FUZZ_EXAMPLES", "25"))
ROLES = ("admin", "user")
STATUSES: dict[str, Counter[int]] = {role: Counter() for role in ROLES}
OPERATIONS: set[str] = set()


@pytest.fixture(scope="module")
def live_dock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("fuzz")
    admin_engine = None
    name = f"pavedock_fuzz_{uuid.uuid4().hex[:8]}"
    if POSTGRES_URL:
        admin_engine = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
        with admin_engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    else:
        url = f"sqlite:///{folder / 'dock.sqlite'}"
    upgrade(url)
    port = free_port()
    env = {**os.environ, **TEST_ENV, "PAVEDOCK_ENVIRONMENT": "testing", "PAVEDOCK_DATABASE_URL": url,
           "PAVEDOCK_BROKER_URL": "", "PAVEDOCK_DATA_DIR": str(folder / "data"),
           "PAVEDOCK_LOG_LEVEL": "WARNING"}  # fmt: skip
    api = uvicorn_proc("api", env, port, folder / "api.log").start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, api)
        yield {"url": base, **{role: make_key(env, role) for role in ROLES}, "log": str(api.log)}
    finally:
        api.stop()
        report(folder)
        if admin_engine is not None:
            with admin_engine.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin_engine.dispose()


def report(folder: Path) -> None:
    summary = {
        "operations": len(OPERATIONS),
        "examples_per_operation": EXAMPLES,
        "database": "postgresql" if POSTGRES_URL else "sqlite",
        **{
            role: {
                "requests": sum(counts.values()),
                "server_errors": sum(n for status, n in counts.items() if status >= 500),
                "statuses": dict(sorted(counts.items())),
            }
            for role, counts in STATUSES.items()
        },
    }
    print(f"\nfuzz summary: {json.dumps(summary)}")
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))


@pytest.fixture(scope="module")
def own_keys(live_dock: dict[str, str], tfidf_packages: dict[str, Path]) -> set[int]:
    """A learnware, a few-shot task and their jobs for the generated ids to find; the fuzzing
    keys' own ids (never revoked: the rest of the run would only meet 401s)."""
    package = tfidf_packages["sst2"]
    with httpx.Client(base_url=live_dock["url"], headers=auth(live_dock, "admin"), timeout=60) as http:
        submitted = http.post("/v1/learnwares", files={"package": ("p.zip", package.read_bytes())})
        assert submitted.status_code == 202, submitted.text
        body = {"texts": ["good", "bad"], "labels": [1, 0], "label_names": ["negative", "positive"]}
        assert http.post("/v1/tasks", json=body).status_code == 202
    ids = set()
    for role in ROLES:
        with httpx.Client(base_url=live_dock["url"], headers=auth(live_dock, role), timeout=60) as http:
            ids.add(int(http.get("/v1/keys/me").json()["id"]))
    return ids


def auth(live_dock: dict[str, str], role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {live_dock[role]}"}


@pytest.mark.parametrize("role", ROLES)
def test_no_request_gets_a_server_error(live_dock: dict[str, str], own_keys: set[int], role: str) -> None:
    schema = schemathesis.openapi.from_url(f"{live_dock['url']}/openapi.json")
    failures: list[str] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # an operation the document describes badly is a failure too
            failures.append(f"unreadable operation: {result.err()}")
            continue
        operation = result.ok()
        # The SSE stream of a job that never ends would hold the connection (tests/api covers it).
        if operation.path.endswith("/events"):
            continue
        OPERATIONS.add(f"{operation.method.upper()} {operation.path}")
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz(live_dock, operation, mode, role, own_keys)
            except Unsatisfiable:  # no input to break (a route without parameters)
                assert mode == GenerationMode.NEGATIVE, operation.path
            except (Exception, BaseExceptionGroup) as exc:  # keep fuzzing the other routes; report all
                failures.append(
                    f"{operation.method.upper()} {operation.path} ({mode.value}): {str(exc)[:1500]}"
                )
    assert not failures, "\n\n".join(failures)


def fuzz(live_dock: dict[str, str], operation: Any, mode: Any, role: str, own_keys: set[int]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        if operation.path == "/v1/admin/keys/{key_id}" and case.path_parameters.get("key_id") in own_keys:
            return
        response = case.call(base_url=live_dock["url"], headers=auth(live_dock, role), timeout=60)
        STATUSES[role][response.status_code] += 1
        case.validate_response(
            response, checks=[not_a_server_error, status_code_conformance, content_type_conformance]
        )

    run()
