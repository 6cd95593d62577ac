"""A learnware's model card: the accuracy on the declared inputs where they carry labels,
measured from the predictions validation stored (not from anything the package claims)."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import yaml
from fastapi.testclient import TestClient

from app.jobs.runner import run_stage
from app.jobs.stages import FIT_LEARNWARE_SPEC, VALIDATE_LEARNWARE
from app.learnwares import pipeline
from app.ml.data import load_task
from app.ml.packages import extract_package
from app.ml.runners import load_runner
from app.runtime import Runtime
from app.web.card import _class_id, inputs_accuracy
from tests.web.conftest import Keys, sign_in


def _with_inputs(source: Path, rows: list[dict[str, object]]) -> bytes:
    """The package ``source`` with its declared inputs replaced by ``rows``."""
    out = io.BytesIO()
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        inputs = yaml.safe_load(src.read("learnware.yaml"))["inputs"]
        for info in src.infolist():
            data = src.read(info)
            if info.filename == inputs:
                data = "".join(json.dumps(r) + "\n" for r in rows).encode()
            dst.writestr(info, data)
    return out.getvalue()


def _submit(client: TestClient, csrf: str, package: bytes) -> int:
    response = client.post(
        "/submit",
        data={"csrf_token": csrf},
        files={"package": ("p.zip", package, "application/zip")},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    return int(response.headers["location"].rsplit("/", 1)[1])


def _job_of(runtime: Runtime, learnware_id: int) -> int:
    from sqlalchemy import select

    from app.db.models import Job

    with runtime.db.session() as session:
        return int(session.scalars(select(Job.id).where(Job.learnware_id == learnware_id)).one())


def test_the_card_shows_the_accuracy_on_the_labelled_declared_inputs(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    tfidf_packages: dict[str, Path],
    datasets_dir: Path,
    tmp_path: Path,
) -> None:
    task = load_task(datasets_dir, "sms_spam", "test", limit=60, seed=3)
    names = list(task.label_names)
    rows: list[dict[str, object]] = []
    for i, (text, label) in enumerate(zip(task.texts, task.labels, strict=True)):
        if i % 5 == 4:
            rows.append({"text": text})  # unlabelled: left out
        elif i % 2:
            rows.append({"text": text, "label": int(label)})  # a class id
        else:
            rows.append({"text": text, "label": names[int(label)].upper()})  # a name, any case
    rows.append({"text": "call now to win a prize", "label": "maybe"})  # not a label name
    package = _with_inputs(tfidf_packages["sms_spam"], rows)

    csrf = sign_in(client, keys.developer)
    learnware_id = _submit(client, csrf, package)
    waiting = client.get(f"/learnwares/{learnware_id}").text
    assert "measured once the dock has run it on them" in waiting

    assert (
        run_stage(runtime, _job_of(runtime, learnware_id), VALIDATE_LEARNWARE, pipeline.validate, worker="t")
        == "done"
    )
    page = client.get(f"/learnwares/{learnware_id}").text
    cell = re.search(r'<dd id="inputs-accuracy">(.*?)</dd>', page, re.S)
    assert cell, page

    # What the model predicts on those texts, run here on the package as a user would.
    zip_path = tmp_path / "p.zip"
    zip_path.write_bytes(package)
    predicted = (
        load_runner(extract_package(zip_path, tmp_path / "p")).predict([r["text"] for r in rows]).labels
    )
    truth = [(int(task.labels[i]), int(predicted[i])) for i in range(len(task.texts)) if i % 5 != 4]
    right = sum(y == p for y, p in truth)
    assert f"<strong>{100 * right / len(truth):.1f}%</strong> of {len(truth)} labelled inputs" in cell.group(
        1
    )
    for class_id, name in enumerate(names):
        of_class = [p for y, p in truth if y == class_id]
        assert f"<li>{name}: {sum(p == class_id for p in of_class)} of {len(of_class)}</li>" in cell.group(1)
    assert "1 labels that are not its label names left out" in cell.group(1)


def test_a_card_without_labelled_inputs_says_so(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    csrf = sign_in(client, keys.developer)
    learnware_id = _submit(client, csrf, tfidf_packages["trec"].read_bytes())
    assert (
        run_stage(runtime, _job_of(runtime, learnware_id), VALIDATE_LEARNWARE, pipeline.validate, worker="t")
        == "done"
    )
    assert "its declared inputs carry no labels" in client.get(f"/learnwares/{learnware_id}").text
    job_id = _job_of(runtime, learnware_id)
    assert run_stage(runtime, job_id, FIT_LEARNWARE_SPEC, pipeline.fit_spec, worker="t") == "done"
    page = client.get(f"/learnwares/{learnware_id}").text
    assert re.search(r"fitted by the dock, fitted on \d+ inputs in \d+\.\d s\.</p>", page), page


def test_labels_are_names_or_ids_and_only_the_inputs_validation_ran_on_count() -> None:
    names = ("ham", "spam")
    assert [_class_id(v, names) for v in ("spam", "HAM", 0, 1, 2, -1, True, "eggs", 1.0)] == [
        1, 0, 0, 1, None, None, None, None, None,
    ]  # fmt: skip
    # Five labelled inputs, validation ran on the first four; one of them unlabelled.
    result = inputs_accuracy((0, None, 1, 1, 0), np.array([0, 1, 0, 1]), list(names))
    assert result is not None and (result.n_labelled, result.n_correct) == (3, 2)
    assert result.per_class == [("ham", 1, 1), ("spam", 2, 1)]
    assert inputs_accuracy((None, None, 0), np.array([1, 1]), list(names)) is None
