"""User tasks: few-shot or spec; visible to their owner alone; identification from the index."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.db.models import Job, UserTask
from app.runtime import Runtime
from tests.fixtures.service import Keys, add_ready_learnware, broker_messages, write_spec

TEXTS = ["what a wonderful film", "I hated every minute", "a masterpiece", "dull and far too long"]


def few_shot(**changes: object) -> dict[str, object]:
    return {"texts": TEXTS, "labels": [1, 0, 1, 0], "label_names": ["negative", "positive"], **changes}


def test_a_few_shot_task_is_queued_for_its_owner_alone(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    response = client.post("/v1/tasks", headers=keys.auth("user"), json=few_shot(top_k=3))
    assert response.status_code == 202, response.text
    task_id, job_id = response.json()["task_id"], response.json()["job_id"]
    mine = client.get(f"/v1/tasks/{task_id}", headers=keys.auth("user")).json()
    assert (
        mine["status"] == "pending"
        and mine["n_examples"] == 4
        and mine["top_k"] == 3
        and mine["job_id"] == job_id
    )
    for other in ("user2", "developer", "admin"):
        response = client.get(f"/v1/tasks/{task_id}", headers=keys.auth(other))
        assert response.status_code == 403
        assert (
            response.json()["error"]["message"]
            == f"task {task_id} belongs to another key; only its owner may read it"
        )
    assert client.get(f"/v1/jobs/{job_id}", headers=keys.auth("user2")).status_code == 403
    job = client.get(f"/v1/jobs/{job_id}", headers=keys.auth("user")).json()
    assert job["stage"] == "task.fit" and job["queue"] == "gpu"
    assert [t["id"] for t in client.get("/v1/tasks", headers=keys.auth("user")).json()] == [task_id]
    assert client.get("/v1/tasks", headers=keys.auth("user2")).json() == []
    assert broker_messages(runtime) == 1


def test_labels_may_be_class_names(client: TestClient, keys: Keys) -> None:
    body = few_shot(labels=["positive", "negative", "positive", "negative"])
    assert client.post("/v1/tasks", headers=keys.auth("user"), json=body).status_code == 202


@pytest.mark.parametrize(
    "changes,code,reason",
    [
        ({"labels": [1, 1, 1, 1]}, "invalid_input", "single class"),
        ({"labels": ["positive", "meh", "positive", "negative"]}, "invalid_input", "['meh']"),
        ({"labels": [0, 1, 2, 0]}, "invalid_input", "out of range"),
        ({"labels": [0, 1]}, "validation_error", "2 labels for 4 texts"),
        ({"texts": ["fine", " ", "good", "bad"]}, "invalid_input", "text 1 is empty"),
        ({"label_names": ["positive", "positive"]}, "invalid_input", "duplicate"),
        ({"label_names": ["only"]}, "validation_error", "label_names"),
        ({"texts": ["a" * 5000, "b", "c", "d"]}, "invalid_input", "over 4000 characters"),
        ({"top_k": 0}, "validation_error", "top_k"),
    ],
)
def test_bad_few_shot_tasks_are_refused(
    changes: dict[str, object], code: str, reason: str, client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    response = client.post("/v1/tasks", headers=keys.auth("user"), json=few_shot(**changes))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code
    assert reason in response.json()["error"]["message"]
    with runtime.db.session() as session:
        assert session.scalar(select(func.count()).select_from(UserTask)) == 0
        assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert broker_messages(runtime) == 0


def test_too_many_examples_are_refused(client: TestClient, keys: Keys, runtime: Runtime) -> None:
    n = runtime.settings.max_task_examples + 1
    body = few_shot(texts=["text"] * n, labels=[i % 2 for i in range(n)])
    response = client.post("/v1/tasks", headers=keys.auth("user"), json=body)
    assert response.status_code == 422
    assert "over the limit" in response.json()["error"]["message"]


def test_a_task_spec_keeps_the_examples_at_home(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int], tmp_path: Path
) -> None:
    space_id, dim = space
    spec = write_spec(tmp_path / "task", space_id, np.sign(np.random.default_rng(2).standard_normal(dim)))
    response = client.post(
        "/v1/tasks/spec",
        headers=keys.auth("user"),
        files={"spec": ("spec.safetensors", spec.read_bytes())},
        data={"top_k": "5", "label_names": '["negative", "positive"]'},
    )
    assert response.status_code == 202, response.text
    task = client.get(f"/v1/tasks/{response.json()['task_id']}", headers=keys.auth("user")).json()
    assert task["n_examples"] == 0 and task["spec_id"] is not None and task["examples_kept"] is False
    job = client.get(f"/v1/jobs/{response.json()['job_id']}", headers=keys.auth("user")).json()
    assert job["stage"] == "task.identify" and job["queue"] == "cpu"


def test_a_bad_task_spec_is_refused(
    client: TestClient, keys: Keys, space: tuple[str, int], tmp_path: Path
) -> None:
    space_id, dim = space
    spec = write_spec(tmp_path / "task", space_id, np.ones(dim + 1))
    response = client.post(
        "/v1/tasks/spec", headers=keys.auth("user"), files={"spec": ("s", spec.read_bytes())}
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "incompatible_spec"


def test_identify_ranks_by_cosine_and_follows_the_database_without_a_restart(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int], tmp_path: Path
) -> None:
    space_id, dim = space
    rng = np.random.default_rng(3)
    me = client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"]
    base = [np.sign(rng.standard_normal(dim)) for _ in range(3)]  # the default space holds sign specs
    ids = [add_ready_learnware(runtime, me, f"lw{i}", v) for i, v in enumerate(base)]
    query = np.sign(base[1] + 0.3 * rng.standard_normal(dim))
    spec = write_spec(tmp_path / "q", space_id, query)

    def identify() -> dict:  # type: ignore[type-arg]
        response = client.post(
            "/v1/identify",
            headers=keys.auth("user"),
            files={"spec": ("s", spec.read_bytes())},
            data={"k": "3"},
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    first = identify()
    assert first["matches"][0]["learnware_id"] == ids[1]
    assert first["matches"][0]["score"] > 0.9 > first["matches"][1]["score"]
    assert first["index_version"] == 3
    # Deleting the best learnware takes it out of the ranking at once.
    assert client.delete(f"/v1/learnwares/{ids[1]}", headers=keys.auth("developer")).status_code == 200
    second = identify()
    assert ids[1] not in [m["learnware_id"] for m in second["matches"]]
    assert second["index_version"] == 4
    # A learnware made ready by another process shows up in the next search.
    new_id = add_ready_learnware(runtime, me, "late", query)
    assert identify()["matches"][0]["learnware_id"] == new_id


def test_a_tasks_ranking_puts_learnwares_of_its_label_set_first(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    from app.tasks.service import rank

    _, dim = space
    rng = np.random.default_rng(5)
    me = client.get("/v1/keys/me", headers=keys.auth("developer")).json()["id"]
    query = np.sign(rng.standard_normal(dim))
    closest = add_ready_learnware(runtime, me, "closest", np.sign(query + 0.1 * rng.standard_normal(dim)))
    speaks = add_ready_learnware(
        runtime, me, "speaks", np.sign(query + rng.standard_normal(dim)), ("Spam", "ham")
    )
    with runtime.db.session() as session:
        plain, _ = rank(session, runtime, runtime.default_space_id, query, 2)
        labelled, _ = rank(session, runtime, runtime.default_space_id, query, 2, ["ham", "spam"])
    assert [r["learnware_id"] for r in plain] == [closest, speaks]
    assert [r["learnware_id"] for r in labelled] == [speaks, closest]
    assert [r["labels_match"] for r in labelled] == [True, False] and labelled[0]["rank"] == 1
