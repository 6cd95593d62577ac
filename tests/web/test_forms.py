"""The pages' forms on the real services: bad input gets the API's reason beside its field and
nothing is stored or queued; good input makes the same rows and jobs the API makes."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.db.models import Job, Learnware, LearnwareStatus, TaskStatus, UserTask
from app.runtime import Runtime
from tests.fixtures.service import broker_messages, stored_blobs
from tests.web.conftest import Keys, sign_in
from tests.web.test_browse import add

SHOTS = "text,label\ngreat film,positive\nawful plot,negative\nloved it,positive\nboring,negative\n"


def count(runtime: Runtime, model: type) -> int:  # type: ignore[type-arg]
    with runtime.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_find_refuses_bad_examples_beside_the_field_and_stores_nothing(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    csrf = sign_in(client, keys.user)
    before = broker_messages(runtime)
    for data, field, message in (
        ({"examples": "one,positive"}, "examples", "found 1 example"),
        ({"examples": "a,x\nb,y", "label_names": "x,z"}, "label_names", "are not among the label names"),
        ({"examples": "a\nb"}, "examples", "line 1 has 1 column"),
    ):
        response = client.post("/find", data={**data, "csrf_token": csrf})
        assert response.status_code == 422, response.text
        assert f'id="{field}-error"' in response.text and message in response.text
        assert data["examples"] in response.text  # what was typed stays in the form
    assert count(runtime, UserTask) == 0 and count(runtime, Job) == 0
    assert broker_messages(runtime) == before


def test_find_posts_a_task_and_keeps_the_examples_in_the_page_for_reuse(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    csrf = sign_in(client, keys.user)
    response = client.post(
        "/find", data={"examples": SHOTS, "csrf_token": csrf}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200, response.text
    with runtime.db.session() as session:
        task = session.scalars(select(UserTask)).one()
        assert task.label_names == ["positive", "negative"] and task.n_examples == 4
        assert task.examples is not None and task.examples["labels"] == [0, 1, 0, 1]
        job = session.scalars(select(Job)).one()
        assert job.task_id == task.id and job.kind == "task.identify"
    assert response.headers["HX-Push-Url"] == f"/tasks/{task.id}"
    assert f'hx-get="/tasks/{task.id}/progress"' in response.text  # polls while it runs
    textarea = re.search(r'<textarea id="reuse-examples"[^>]*>(.*?)</textarea>', response.text, re.S)
    assert textarea and '{"text": "great film", "label": "positive"}' in textarea.group(1).replace(
        "&#34;", '"'
    )
    # A reload gets the page without the examples (the dock does not keep them).
    again = client.get(f"/tasks/{task.id}")
    assert re.search(r'<textarea id="reuse-examples"[^>]*></textarea>', again.text)


def test_find_reads_an_uploaded_utf16_tsv(client: TestClient, keys: Keys, runtime: Runtime) -> None:
    csrf = sign_in(client, keys.user)
    data = "Text\tLabel\nbonjour\t0\nau revoir\t1\n".encode("utf-16")
    response = client.post(
        "/find",
        data={"csrf_token": csrf, "label_names": "hello, goodbye"},
        files={"file": ("shots.tsv", data, "text/tab-separated-values")},
    )
    assert response.status_code == 200, response.text
    with runtime.db.session() as session:
        task = session.scalars(select(UserTask)).one()
        assert task.label_names == ["hello", "goodbye"] and task.examples == {
            "texts": ["bonjour", "au revoir"],
            "labels": [0, 1],
        }
    bad = client.post(
        "/find",
        data={"csrf_token": csrf},
        files={"file": ("s.csv", "a,é\nb,x\n".encode("latin-1"), "text/csv")},
    )
    assert bad.status_code == 422 and "is not UTF-8" in bad.text


def test_tasks_and_jobs_are_their_owners_alone(client: TestClient, keys: Keys, runtime: Runtime) -> None:
    csrf = sign_in(client, keys.user)
    client.post("/find", data={"examples": SHOTS, "csrf_token": csrf})
    with runtime.db.session() as session:
        task_id = session.scalars(select(UserTask.id)).one()
        job_id = session.scalars(select(Job.id)).one()
    assert client.get(f"/jobs/{job_id}").status_code == 200
    for who in ("user2", "admin"):
        sign_in(client, getattr(keys, who))
        for path in (f"/tasks/{task_id}", f"/tasks/{task_id}/progress"):
            response = client.get(path)
            assert response.status_code == 403 and "belongs to another key" in response.text
        if who == "user2":
            assert client.get(f"/jobs/{job_id}").status_code == 403
    assert client.get("/tasks/999").status_code == 404


def _ranked_task(runtime: Runtime, keys: Keys, space_id: str) -> tuple[int, int]:
    """A task as the worker leaves it: ranked, its examples erased."""
    adapter = add(
        runtime,
        space_id,
        "developer",
        "sst2 adapter",
        model_format="peft-lora",
        base_model="all-MiniLM-L6-v2",
    )
    with runtime.db.session() as session:
        from app.db.models import ApiKey

        user = session.scalars(select(ApiKey).where(ApiKey.name == "user")).one()
        task = UserTask(
            owner_id=user.id,
            status=TaskStatus.ready,
            label_names=["negative", "positive"],
            examples=None,
            n_examples=4,
            space_id=space_id,
            results=[
                {
                    "rank": 1,
                    "learnware_id": adapter,
                    "score": 0.91,
                    "name": "sst2 adapter",
                    "task_type": "text-classification",
                    "model_format": "peft-lora",
                    "label_names": ["negative", "positive"],
                    "labels_match": True,
                    "shot_accuracy": 0.75,
                    "shot_confidence": 0.6,
                    "tags": [],
                }
            ],
        )
        session.add(task)
        session.flush()
        return task.id, adapter


def test_a_map_the_examples_chose_shows_its_cost_and_older_results_still_render(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    task_id, _ = _ranked_task(runtime, keys, space[0])
    sign_in(client, keys.user)
    page = client.get(f"/tasks/{task_id}")  # stored before shot_map_cost existed
    assert page.status_code == 200 and "for the map your examples chose" not in page.text
    with runtime.db.session() as session:
        task = session.get(UserTask, task_id)
        assert task is not None and task.results is not None
        task.results = [
            {
                **task.results[0],
                "label_map": {"negative": "0", "positive": "1"},
                "label_map_how": "examples",
                "shot_log_likelihood": -0.42,
                "shot_map_cost": 0.17,
                "spec_recomputed": False,
                "spec_copy_of": 7,
                "reason": "checked on your 4 examples: 75% right",
            }
        ]
    page = client.get(f"/tasks/{task_id}")
    # Whose spec it is, whether it copies one listed above, and why it ranks where it does.
    assert "the developer's, not fitted by the dock" in page.text
    assert 'near-identical to that of <a href="/learnwares/7">learnware 7</a>' in page.text
    assert "Why here: checked on your 4 examples: 75% right" in page.text
    assert "less the label map&#39;s cost" in page.text or "less the label map's cost" in page.text
    assert "-0.42 − 0.17 for the map your examples chose" in page.text
    assert "negative → 0" in page.text
    assert "Agreement with the other close matches" not in page.text
    # A task posted as a spec only: its close matches' agreement, where the accuracy would be.
    with runtime.db.session() as session:
        task = session.get(UserTask, task_id)
        assert task is not None and task.results is not None
        unchecked = {**task.results[0], "shot_accuracy": None, "shot_confidence": None, "agreement": 0.64}
        task.results = [unchecked]
    page = client.get(f"/tasks/{task_id}")
    assert "Agreement with the other close matches" in page.text and "κ 0.64" in page.text
    # A checked match whose agreement weighed in on its place: its κ beside its accuracy.
    with runtime.db.session() as session:
        task = session.get(UserTask, task_id)
        assert task is not None and task.results is not None
        task.results = [{**unchecked, "shot_accuracy": 0.75, "agreement": 0.58, "agreement_weighed": True}]
    page = client.get(f"/tasks/{task_id}")
    assert "Agreement with the other checked matches (added to the score)" in page.text
    assert "κ 0.58" in page.text and "75%" in page.text
    assert "Agreement with the other close matches" not in page.text


def test_a_ranked_task_shows_what_the_api_says_and_starts_a_fine_tune(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    task_id, adapter = _ranked_task(runtime, keys, space[0])
    csrf = sign_in(client, keys.user)
    page = client.get(f"/tasks/{task_id}")
    assert f'data-learnware="{adapter}" data-rank="1"' in page.text
    assert "0.910" in page.text and "75%" in page.text and "your label set" in page.text
    assert f'href="/learnwares/{adapter}#transfer" data-action="transfer"' in page.text  # move it
    assert (
        "2 of your 2 labels" in page.text
        and 'id="reuse" ' in page.text
        and "hidden" not in page.text.split('id="reuse"')[1][:40]
    )

    form = {"csrf_token": csrf, "label_names": "negative, positive", "finetune": "1", "merge_k": "0"}
    shots = "a,negative\nb,positive\nc,negative\nd,positive\ne,negative\nf,positive\n"
    for data, field, message in (
        ({"examples": shots, "steps": "many"}, "steps", "steps must be a whole number"),
        ({"examples": shots, "steps": "0"}, "steps", "greater than or equal to 1"),
        ({"examples": "", "steps": "5"}, "examples", "found 0 examples"),
        ({"examples": shots, "steps": "5", "finetune": ""}, "reuse", "nothing to do"),
    ):
        response = client.post(f"/tasks/{task_id}/reuse", data={**form, **data})
        assert response.status_code == 422, response.text
        assert f'id="{field}-error"' in response.text and message in response.text
    assert count(runtime, Job) == 0

    started = client.post(f"/tasks/{task_id}/reuse", data={**form, "examples": shots, "steps": "5"})
    assert started.status_code == 202, started.text
    with runtime.db.session() as session:
        job = session.scalars(select(Job)).one()
        assert job.kind == "reuse.finetune" and job.params is not None
        assert job.params["learnware_id"] == adapter and job.params["steps"] == 5 and job.params["private"]
        assert job.params["labels"] == [0, 1, 0, 1, 0, 1]
    assert f'hx-get="/jobs/{job.id}/progress"' in started.text
    progress = client.get(f"/jobs/{job.id}/progress")
    assert 'hx-trigger="every 1s"' in progress.text and "queued" in progress.text


def test_reuse_of_a_task_still_running_is_a_conflict(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    csrf = sign_in(client, keys.user)
    client.post("/find", data={"examples": SHOTS, "csrf_token": csrf})
    with runtime.db.session() as session:
        task_id = session.scalars(select(UserTask.id)).one()
    response = client.post(
        f"/tasks/{task_id}/reuse", data={"csrf_token": csrf, "examples": SHOTS, "finetune": "1", "steps": "5"}
    )
    assert response.status_code == 409 and "reuse needs its ranked learnwares" in response.text
    assert count(runtime, Job) == 1  # the task's own


def _with_readme(source: Path, readme: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("README.md", readme)
    return out.getvalue()


def test_submit_refuses_bad_packages_beside_the_field_and_stores_nothing(
    client: TestClient, keys: Keys, runtime: Runtime
) -> None:
    sign_in(client, keys.user)
    refused = client.get("/submit")
    assert refused.status_code == 403 and "needs a developer key" in refused.text
    csrf = sign_in(client, keys.developer)
    before = broker_messages(runtime)
    bad = io.BytesIO()
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("model.onnx", b"x")
    for files, field, message, status in (
        ({"package": ("p.zip", b"not a zip", "application/zip")}, "package", "not a zip", 422),
        ({"package": ("p.zip", bad.getvalue(), "application/zip")}, "package", "no learnware.yaml", 422),
        ({}, "package", "choose a package zip", 422),
    ):
        response = client.post("/submit", data={"csrf_token": csrf}, files=files)
        assert response.status_code == status, response.text
        assert f'id="{field}-error"' in response.text and message in response.text.lower()
    assert (
        count(runtime, Learnware) == 0 and stored_blobs(runtime) == 0 and broker_messages(runtime) == before
    )


def test_submit_then_follow_download_and_delete(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    csrf = sign_in(client, keys.developer)
    readme = "# Spam filter\n\n<script>alert(1)</script>\n\n[click](javascript:alert(1)) and [docs](https://example.org)\n"
    package = _with_readme(tfidf_packages["sms_spam"], readme)
    response = client.post(
        "/submit",
        data={"csrf_token": csrf},
        files={"package": ("spam.zip", package, "application/zip")},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    learnware_id = int(response.headers["location"].rsplit("/", 1)[1])
    again = client.post(
        "/submit", data={"csrf_token": csrf}, files={"package": ("spam.zip", package, "application/zip")}
    )
    assert again.status_code == 409 and f"already submitted as learnware {learnware_id}" in again.text

    page = client.get(f"/learnwares/{learnware_id}")
    assert page.status_code == 200
    assert f'hx-get="/learnwares/{learnware_id}/status"' in page.text  # followed while it is checked
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and "<script>alert" not in page.text
    assert 'href="javascript:' not in page.text and 'href="https://example.org"' in page.text
    assert "pavedock download" in page.text and "onnxruntime" in page.text
    status = client.get(f"/learnwares/{learnware_id}/status", headers={"HX-Request": "true"})
    assert "<html" not in status.text and "pending" in status.text and "HX-Refresh" not in status.headers

    download = client.get(f"/learnwares/{learnware_id}/download")
    assert download.status_code == 200 and download.content == package
    api = client.get(f"/v1/learnwares/{learnware_id}/package", headers=keys.auth("developer"))
    assert api.status_code == 200
    listed = client.get(f"/v1/learnwares/{learnware_id}", headers=keys.auth("developer")).json()
    assert listed["download_count"] == 2 and listed["ranked_first_count"] == 0
    # Not ready: another developer cannot reach it.
    sign_in(client, keys.developer2)
    assert client.get(f"/learnwares/{learnware_id}").status_code == 404
    assert client.get(f"/learnwares/{learnware_id}/download").status_code == 404
    assert (
        client.post(
            f"/learnwares/{learnware_id}/delete", data={"csrf_token": sign_in(client, keys.developer2)}
        ).status_code
        == 404
    )

    csrf = sign_in(client, keys.developer)
    assert f'data-learnware="{learnware_id}"' in client.get("/mine").text
    deleted = client.post(
        f"/learnwares/{learnware_id}/delete", data={"csrf_token": csrf}, follow_redirects=False
    )
    assert deleted.status_code == 303 and deleted.headers["location"] == "/mine"
    with runtime.db.session() as session:
        row = session.get(Learnware, learnware_id)
        assert row is not None and row.status == LearnwareStatus.deleted
    assert f'data-learnware="{learnware_id}"' not in client.get("/mine").text


@pytest.mark.parametrize("name", ["htmx.min.js", "web.js", "web.css", "favicon.svg"])
def test_assets_are_served_from_the_repository(client: TestClient, name: str) -> None:
    response = client.get(f"/assets/{name}")
    assert response.status_code == 200 and response.content == (Path("app/web/static") / name).read_bytes()
    assert client.get("/assets/../settings.py").status_code == 404


def test_the_vendored_htmx_is_the_npm_release_it_names() -> None:
    record = json.loads(Path("app/web/static/htmx.json").read_text(encoding="utf-8"))
    data = Path("app/web/static/htmx.min.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == record["sha256"]
    assert f'version:"{record["version"]}"'.encode() in data


def test_find_by_a_spec_fitted_locally(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int], tmp_path: Path
) -> None:
    import numpy as np

    from tests.fixtures.service import write_spec

    csrf = sign_in(client, keys.user)
    bad = client.post(
        "/find/spec",
        data={"csrf_token": csrf},
        files={"spec": ("t.safetensors", b"junk", "application/octet-stream")},
    )
    assert bad.status_code == 422 and 'id="spec-error"' in bad.text and "not safetensors" in bad.text
    assert count(runtime, UserTask) == 0
    spec = write_spec(
        tmp_path / "task", space[0], np.sign(np.random.default_rng(0).standard_normal(space[1]))
    )
    response = client.post(
        "/find/spec",
        data={"csrf_token": csrf, "spec_label_names": "negative, positive"},
        files={"spec": ("task.safetensors", spec.read_bytes(), "application/octet-stream")},
    )
    assert response.status_code == 200, response.text
    with runtime.db.session() as session:
        task = session.scalars(select(UserTask)).one()
        assert (
            task.examples is None
            and task.spec_id is not None
            and task.label_names == ["negative", "positive"]
        )
    assert "A spec fitted on your machine" in response.text


def test_transfer_from_a_learnwares_page(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    from app.ml.encoders import resolve_base
    from app.ml.errors import UnknownBase

    adapter = add(
        runtime,
        space[0],
        "developer",
        "sst2 adapter",
        model_format="peft-lora",
        base_model="all-MiniLM-L6-v2",
    )
    onnx = add(runtime, space[0], "developer", "an onnx model")
    csrf = sign_in(client, keys.user)
    page = client.get(f"/learnwares/{adapter}")
    assert 'id="transfer-form"' in page.text and '<option value="all-mpnet-base-v2"' in page.text
    # Every method is offered: UTD's result is a learnware too (a pooled-linear map).
    assert '<option value="bico"' in page.text and '<option value="utd"' in page.text
    assert 'id="transfer-form"' not in client.get(f"/learnwares/{onnx}").text  # adapters only
    form = {"csrf_token": csrf, "target_base": "all-mpnet-base-v2", "method": "bico", "texts": "good\nbad\n"}
    for data, field, message in (
        ({"texts": "only one"}, "texts", "at least two calibration texts"),
        ({"method": "nope"}, "method", "unknown transfer method"),
        ({"target_base": "all-MiniLM-L6-v2"}, "target_base", "already on all-MiniLM-L6-v2"),
    ):
        response = client.post(f"/learnwares/{adapter}/transfer", data={**form, **data})
        assert response.status_code == 422, response.text
        assert f'id="{field}-error"' in response.text and message in response.text
    assert count(runtime, Job) == 0
    try:
        resolve_base("all-mpnet-base-v2")
        installed = True
    except UnknownBase:
        installed = False
    response = client.post(f"/learnwares/{adapter}/transfer", data=form, follow_redirects=False)
    if installed:
        assert response.status_code == 303 and response.headers["location"].startswith("/jobs/")
        assert count(runtime, Job) == 1
    else:
        assert response.status_code == 422 and 'id="target_base-error"' in response.text
        assert "pavedock bases install all-mpnet-base-v2" in response.text and count(runtime, Job) == 0


def test_merging_the_top_adapters_starts_both_jobs(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    task_id, first = _ranked_task(runtime, keys, space[0])
    second = add(
        runtime,
        space[0],
        "developer2",
        "other adapter",
        model_format="peft-lora",
        base_model="all-MiniLM-L6-v2",
    )
    with runtime.db.session() as session:
        task = session.get(UserTask, task_id)
        assert task is not None and task.results is not None
        task.results = [
            *task.results,
            {**task.results[0], "rank": 2, "learnware_id": second, "name": "other adapter"},
        ]
    csrf = sign_in(client, keys.user)
    shots = "a,negative\nb,positive\nc,negative\nd,positive\ne,negative\nf,positive\n"
    response = client.post(
        f"/tasks/{task_id}/reuse",
        data={
            "csrf_token": csrf,
            "examples": shots,
            "label_names": "negative,positive",
            "finetune": "1",
            "merge_k": "2",
            "steps": "5",
        },
    )
    assert response.status_code == 202, response.text
    with runtime.db.session() as session:
        jobs = {j.kind: j for j in session.scalars(select(Job))}
        assert set(jobs) == {"reuse.finetune", "reuse.merge"}
        assert jobs["reuse.merge"].params is not None and jobs["reuse.merge"].params["learnware_ids"] == [
            first,
            second,
        ]
    assert "Fine-tune: job" in response.text and "Merge: job" in response.text


def test_a_refused_learnware_shows_why_and_stops_polling(
    client: TestClient, keys: Keys, runtime: Runtime, space: tuple[str, int]
) -> None:
    refused = add(
        runtime,
        space[0],
        "developer",
        "one-class model",
        status=LearnwareStatus.failed,
        status_reason="the model predicts a single class (ham: 64) on its 64 declared inputs",
    )
    sign_in(client, keys.developer)
    page = client.get(f"/learnwares/{refused}")
    assert 'id="status-reason">the model predicts a single class' in page.text
    assert "/status" not in page.text.split('id="lw-status"')[1].split(">")[0]  # no polling
    assert 'id="download"' not in page.text
    mine = client.get("/mine").text
    assert "the model predicts a single class" in mine and 'hx-trigger="every 2s"' not in mine
