"""Reuse endpoints on a real migrated database: requests are checked before a job is queued,
and private learnwares stay with their owner. (Workers run them in tests/e2e.)"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.db.models import Job, Learnware, LearnwareStatus, TaskStatus, UserTask
from app.ml.reuse import split_shots
from app.runtime import Runtime
from tests.fixtures.service import Keys, broker_messages, submit


def ready(
    runtime: Runtime,
    client: TestClient,
    keys: Keys,
    package: Path,
    *,
    who: str = "developer",
    private: bool = False,
) -> int:
    """Submit through the API, then mark the learnware ready as its worker would."""
    response = submit(client, keys, package, who=who)
    assert response.status_code == 202, response.text
    learnware_id = int(response.json()["learnware_id"])
    with runtime.db.session() as session:
        session.execute(
            update(Learnware)
            .where(Learnware.id == learnware_id)
            .values(status=LearnwareStatus.ready, private=private)
        )
    return learnware_id


@pytest.fixture
def market(
    runtime: Runtime,
    client: TestClient,
    keys: Keys,
    lora_packages: dict[str, Path],
    tfidf_packages: dict[str, Path],
) -> dict[str, int]:
    return {
        "sst2": ready(runtime, client, keys, lora_packages["sst2"]),
        "spam": ready(runtime, client, keys, lora_packages["sms_spam"]),
        "onnx": ready(runtime, client, keys, tfidf_packages["trec"]),
    }


SHOTS = {
    "texts": ["great film", "awful film", "loved it", "hated it"],
    "labels": [1, 0, 1, 0],
    "label_names": ["negative", "positive"],
}


def test_merge_methods_are_listed_with_their_parameters(client: TestClient, keys: Keys) -> None:
    methods = {m["name"]: m for m in client.get("/v1/merge-methods", headers=keys.auth("user")).json()}
    assert {"task_arithmetic", "ties", "dare", "tsv_m", "iso_c", "iso_cts"} <= set(methods)
    assert "pact" in methods["iso_c"]["params"]["properties"]


def test_a_merge_is_queued_with_its_checked_parameters(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int]
) -> None:
    before = broker_messages(runtime)
    body = {"learnware_ids": [market["sst2"], market["spam"]], "method": "iso_c", "params": {"pact": True}}
    response = client.post("/v1/merges", json=body, headers=keys.auth("user"))
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    job = client.get(f"/v1/jobs/{job_id}", headers=keys.auth("user")).json()
    assert job["stage"] == "reuse.merge" and job["queue"] == "gpu" and job["state"] == "queued"
    assert broker_messages(runtime) == before + 1
    with runtime.db.session() as session:
        stored = session.get(Job, job_id)
        assert stored is not None and stored.params is not None
        assert stored.params["params"]["pact"] is True and "alpha" in stored.params["params"]
        assert stored.params["label_names"] == ["negative", "positive", "ham", "spam"]


def full_finetune_rows(runtime: Runtime, like: int, names: list[list[str]]) -> list[int]:
    """Ready hf-seqcls learnwares of MiniLM, as rows (a 90 MB package is over these tests' upload
    limit; the e2e tests submit and merge real ones)."""
    ids = []
    with runtime.db.session() as session:
        template = session.get(Learnware, like)
        assert template is not None
        for labels in names:
            row = Learnware(
                owner_id=template.owner_id, status=LearnwareStatus.ready, name="classifier",
                task_type="text-classification", label_names=labels, model_format="hf-seqcls",
                base_model="all-MiniLM-L6-v2", manifest={}, package_sha256=template.package_sha256,
                package_size=template.package_size, space_id=template.space_id,
            )  # fmt: skip
            session.add(row)
            session.flush()
            ids.append(row.id)
    return ids


def test_full_finetunes_merge_but_not_with_adapters(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int]
) -> None:
    full = full_finetune_rows(runtime, market["sst2"], [["negative", "positive"], ["ham", "spam"]])
    body = {"learnware_ids": full, "method": "ties", "params": {"pact": True}}
    response = client.post("/v1/merges", json=body, headers=keys.auth("user"))
    assert response.status_code == 202, response.text
    with runtime.db.session() as session:
        stored = session.get(Job, response.json()["job_id"])
        assert stored is not None and stored.params is not None
        assert stored.params["format"] == "hf-seqcls" and stored.params["base"] == "all-MiniLM-L6-v2"
    mixed = {"learnware_ids": [full[0], market["sst2"]], "method": "iso_c"}
    response = client.post("/v1/merges", json=mixed, headers=keys.auth("user"))
    assert response.status_code == 422 and "different formats" in response.text
    # Full fine-tunes can be merged, not fine-tuned or transferred (adapters only).
    tune = {"learnware_id": full[0], **SHOTS}
    response = client.post("/v1/finetunes", json=tune, headers=keys.auth("user"))
    assert response.status_code == 422 and "only peft-lora adapters" in response.text


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"method": "iso_c", "ids": ["sst2", "onnx"]}, 422, "only peft-lora adapters and hf-seqcls"),
        ({"method": "nope", "ids": ["sst2", "spam"]}, 422, "known"),
        ({"method": "ties", "ids": ["sst2", "spam"], "params": {"top_k": 7.0}}, 422, "top_k"),
        ({"method": "ties", "ids": ["sst2", "spam"], "params": {"bogus": 1}}, 422, "bogus"),
        ({"method": "iso_c", "ids": ["sst2", "sst2"]}, 422, "repeat"),
        ({"method": "iso_c", "ids": ["sst2"]}, 422, ""),
    ],
)
def test_bad_merges_are_refused_before_any_job(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    market: dict[str, int],
    body: dict[str, object],
    status: int,
    message: str,
) -> None:
    before = broker_messages(runtime)
    ids = [market[name] for name in body["ids"]]  # type: ignore[attr-defined]
    payload = {"learnware_ids": ids, "method": body["method"], "params": body.get("params", {})}
    response = client.post("/v1/merges", json=payload, headers=keys.auth("user"))
    assert response.status_code == status, response.text
    assert message in response.text
    assert broker_messages(runtime) == before


def test_unknown_and_unready_learnwares_are_refused(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int], lora_packages: dict[str, Path]
) -> None:
    body = {"learnware_ids": [market["sst2"], 999999], "method": "iso_c"}
    assert client.post("/v1/merges", json=body, headers=keys.auth("user")).status_code == 404
    with runtime.db.session() as session:
        session.execute(
            update(Learnware).where(Learnware.id == market["spam"]).values(status=LearnwareStatus.fitting)
        )
    body = {"learnware_ids": [market["sst2"], market["spam"]], "method": "iso_c"}
    # Not ready: the owner is told why; others do not see it at all.
    assert client.post("/v1/merges", json=body, headers=keys.auth("developer")).status_code == 409
    assert client.post("/v1/merges", json=body, headers=keys.auth("user")).status_code == 404


def test_finetune_checks_the_shots(client: TestClient, keys: Keys, market: dict[str, int]) -> None:
    good = {"learnware_id": market["sst2"], **SHOTS}
    assert client.post("/v1/finetunes", json=good, headers=keys.auth("user")).status_code == 202
    unknown = {**good, "labels": ["positive", "negative", "great", "negative"]}
    response = client.post("/v1/finetunes", json=unknown, headers=keys.auth("user"))
    assert response.status_code == 422 and "['great'] are not among" in response.text
    single = {**good, "labels": [1, 1, 1, 1]}
    assert "single class" in client.post("/v1/finetunes", json=single, headers=keys.auth("user")).text


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"target_base": "no-such-base"}, "unknown target base"),
        ({"target_base": "all-MiniLM-L6-v2"}, "already on"),
        ({"method": "nope"}, "unknown transfer method"),
    ],
)
def test_bad_transfers_are_refused(
    client: TestClient, keys: Keys, market: dict[str, int], changes: dict[str, str], message: str
) -> None:
    body = {
        "learnware_id": market["sst2"],
        "target_base": "all-mpnet-base-v2",
        "method": "bico",
        "texts": SHOTS["texts"],
        **changes,
    }
    response = client.post("/v1/transfers", json=body, headers=keys.auth("user"))
    assert response.status_code == 422, response.text
    assert message in response.text


def test_private_learnwares_stay_with_their_owner(
    client: TestClient, keys: Keys, runtime: Runtime, lora_packages: dict[str, Path]
) -> None:
    learnware_id = ready(runtime, client, keys, lora_packages["sst2"], who="developer", private=True)
    assert client.get(f"/v1/learnwares/{learnware_id}", headers=keys.auth("developer")).status_code == 200
    assert client.get(f"/v1/learnwares/{learnware_id}", headers=keys.auth("developer2")).status_code == 404
    listed = client.get("/v1/learnwares", headers=keys.auth("user")).json()
    assert learnware_id not in [lw["id"] for lw in listed["items"]]
    assert learnware_id not in runtime.indexes.live(runtime.default_space_id).index.ids()


def identified_task(
    runtime: Runtime, client: TestClient, keys: Keys, ranked: list[int], *, who: str = "user"
) -> int:
    """Post a few-shot task, then give it the ranking its worker would have stored."""
    response = client.post("/v1/tasks", json=SHOTS, headers=keys.auth(who))
    assert response.status_code == 202, response.text
    task_id = int(response.json()["task_id"])
    results = [{"rank": r + 1, "learnware_id": i, "score": 0.9 - 0.1 * r} for r, i in enumerate(ranked)]
    with runtime.db.session() as session:
        session.execute(
            update(UserTask)
            .where(UserTask.id == task_id)
            .values(status=TaskStatus.ready, results=results, examples=None)
        )
    return task_id


REUSE_SHOTS = {
    "texts": ["great film", "awful film", "loved it", "hated it", "superb", "dreadful", "a joy", "a bore"],
    "labels": ["positive", "negative"] * 4,
    "label_names": ["negative", "positive"],
}


def test_task_reuse_finetunes_the_top_adapter_and_merges_the_top_k(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int]
) -> None:
    # The ONNX learnware ranks first but cannot be fine-tuned or merged: the adapters are used.
    task_id = identified_task(runtime, client, keys, [market["onnx"], market["sst2"], market["spam"]])
    before = broker_messages(runtime)
    body = {**REUSE_SHOTS, "merge_k": 3, "merge_method": "ties", "holdout": 0.25, "seed": 3}
    response = client.post(f"/v1/tasks/{task_id}/reuse", json=body, headers=keys.auth("user"))
    assert response.status_code == 202, response.text
    out = response.json()
    assert out["finetune"]["learnware_ids"] == [market["sst2"]] and out["finetune"]["ranks"] == [2]
    assert out["merge"]["learnware_ids"] == [market["sst2"], market["spam"]]
    assert out["merge"]["ranks"] == [2, 3]
    assert out["skipped"] == ["merge: 2 adapter learnwares among the task's matches, not 3"]
    assert broker_messages(runtime) == before + 2
    with runtime.db.session() as session:
        tune = session.get(Job, out["finetune"]["job_id"])
        merge = session.get(Job, out["merge"]["job_id"])
        assert tune is not None and tune.params is not None and merge is not None and merge.params is not None
        assert tune.kind == "reuse.finetune" and tune.params["private"] is True
        assert tune.params["holdout"] == 0.25 and tune.params["seed"] == 3
        assert merge.kind == "reuse.merge" and merge.params["private"] is True
        assert merge.params["method"] == "ties" and "k" in merge.params["params"]
        # The merge is measured on the very shots the fine-tune holds out.
        held = split_shots(tune.params["texts"], tune.params["labels"], 0.25, 3)
        assert merge.params["eval"]["texts"] == held.test_texts
        assert merge.params["eval"]["labels"] == held.test_labels.tolist()
        assert len(held.test_texts) == 2 and merge.params["eval"]["label_names"] == ["negative", "positive"]


def test_task_reuse_refuses_what_it_cannot_do(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int]
) -> None:
    only_onnx = identified_task(runtime, client, keys, [market["onnx"]])
    one_adapter = identified_task(runtime, client, keys, [market["sst2"], market["onnx"]])
    before = broker_messages(runtime)

    def post(task_id: int, who: str = "user", **changes: object) -> tuple[int, str]:
        response = client.post(
            f"/v1/tasks/{task_id}/reuse", json={**REUSE_SHOTS, **changes}, headers=keys.auth(who)
        )
        return response.status_code, response.text

    status, text = post(only_onnx)
    assert status == 422 and "only adapters can be fine-tuned or merged" in text
    assert post(one_adapter, "user2")[0] == 403  # another user's task
    assert post(999999)[0] == 404
    status, text = post(one_adapter, finetune=False, merge_k=0)
    assert status == 422 and "nothing to do" in text
    status, text = post(one_adapter, labels=["positive"] * 8)
    assert status == 422 and "single class" in text
    status, text = post(one_adapter, merge_method="nope")
    assert status == 422 and "nope" in text
    assert broker_messages(runtime) == before
    # Still being identified: the task has no ranking to reuse yet.
    pending = client.post("/v1/tasks", json=SHOTS, headers=keys.auth("user")).json()["task_id"]
    assert post(pending)[0] == 409
    # One adapter: the fine-tune runs, the merge is skipped with its reason.
    status, text = post(one_adapter)
    assert status == 202 and "only one adapter learnware (rank 1)" in text


def test_a_user_key_cannot_publish_what_it_creates(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int]
) -> None:
    """What a user key creates is private to it; publishing is a developer's (or admin's) act."""
    merge = {"learnware_ids": [market["sst2"], market["spam"]], "method": "task_arithmetic"}
    tune = {**SHOTS, "learnware_id": market["sst2"]}
    transfer = {"learnware_id": market["sst2"], "target_base": "all-mpnet-base-v2", "texts": SHOTS["texts"]}
    routes = {"/v1/merges": merge, "/v1/finetunes": tune, "/v1/transfers": transfer}
    before = broker_messages(runtime)
    for route, body in routes.items():
        response = client.post(route, json={**body, "private": False}, headers=keys.auth("user"))
        assert response.status_code == 403, (route, response.text)
        error = response.json()["error"]
        assert error["code"] == "forbidden" and "developer or admin key" in error["message"]
    assert broker_messages(runtime) == before  # nothing queued

    def private_of(response: httpx.Response) -> bool:
        assert response.status_code == 202, response.text
        with runtime.db.session() as session:
            job = session.get(Job, response.json()["job_id"])
            assert job is not None and job.params is not None
            return bool(job.params["private"])

    routes.pop("/v1/transfers")  # accepting one needs the MPNet base installed (tests/e2e does)
    for route, body in routes.items():
        # A user's result is private, asked or not.
        assert private_of(client.post(route, json=body, headers=keys.auth("user"))) is True
        assert private_of(client.post(route, json={**body, "private": True}, headers=keys.auth("user")))
        # A developer and an admin may publish.
        for who in ("developer", "admin"):
            published = client.post(route, json={**body, "private": False}, headers=keys.auth(who))
            assert private_of(published) is False
    # A merge or transfer by a developer is public unless asked; a fine-tune private unless asked.
    assert private_of(client.post("/v1/merges", json=merge, headers=keys.auth("developer"))) is False
    assert private_of(client.post("/v1/finetunes", json=tune, headers=keys.auth("developer"))) is True


def test_what_a_task_reuse_creates_is_private_to_its_user(
    client: TestClient, keys: Keys, runtime: Runtime, market: dict[str, int]
) -> None:
    task_id = identified_task(runtime, client, keys, [market["sst2"], market["spam"]])
    # Asking for a public result changes nothing: this route has no way to publish.
    for body in ({**REUSE_SHOTS, "merge_k": 2}, {**REUSE_SHOTS, "merge_k": 2, "private": False}):
        response = client.post(f"/v1/tasks/{task_id}/reuse", json=body, headers=keys.auth("user"))
        assert response.status_code == 202, response.text
        out = response.json()
        with runtime.db.session() as session:
            for choice in (out["finetune"], out["merge"]):
                job = session.get(Job, choice["job_id"])
                assert job is not None and job.params is not None and job.params["private"] is True
