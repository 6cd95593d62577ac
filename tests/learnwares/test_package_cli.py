"""``pavedock package``: from what a developer has to a learnware the dock makes ready.

Each format's source is made the way a developer makes it (``save_pretrained``, peft's adapter
folder, ``joblib.dump`` of a scikit-learn pipeline, an ONNX export); the command's package is
submitted to the real app and run through the real validation and spec stages in-process.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import joblib
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.jobs.runner import run_stage
from app.jobs.stages import FIT_LEARNWARE_SPEC, VALIDATE_LEARNWARE
from app.learnwares import pipeline
from app.ml.data import load_task
from app.ml.validation import SPEC_FIT_INPUTS, VALIDATION_INPUTS
from app.runtime import Runtime
from app.settings import Settings
from tests.fixtures.service import Keys

runner = CliRunner()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    """The API tests' settings with room for a MiniLM-sized upload (a full model is ~90 MB)."""
    return Settings(
        environment="testing",
        data_dir=tmp_path / "var",
        database_url=database_url,
        max_upload_bytes=256 * 1024 * 1024,
        spec_fit_inputs=64,
        validation_inputs=64,
    )


def unzip(package: Path, member_prefix: str, dest: Path) -> Path:
    """Members of a package under ``member_prefix``, written to ``dest`` as plain files."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(package) as zf:
        for name in zf.namelist():
            if name.startswith(member_prefix) and not name.endswith("/"):
                target = dest / name[len(member_prefix) :].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
    return dest


@pytest.fixture(scope="module")
def sources(
    tmp_path_factory: pytest.TempPathFactory,
    datasets_dir: Path,
    tfidf_packages: dict[str, Path],
    lora_packages: dict[str, Path],
    linear_packages: dict[str, Path],
) -> dict[str, Path]:
    """One developer's source per format, and their declared inputs."""
    root = tmp_path_factory.mktemp("developer")
    # A transformers folder as save_pretrained writes it (config.json names the classes).
    hf = unzip(linear_packages["sst2"], "model/", root / "hf-model")
    (hf / "training_args.bin").write_bytes(b"\x80\x04K\x00.")  # a pickle the command leaves out
    # A peft adapter folder naming its base by its hub name, as a developer's training writes it.
    adapter = unzip(lora_packages["sms_spam"], "adapter/", root / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "sentence-transformers/all-MiniLM-L6-v2"
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    # A scikit-learn pipeline trained on label names, saved with joblib.
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    task = load_task(datasets_dir, "sst2", "train", limit=600, seed=0)
    pipe = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=1000))
    pipe.fit(task.texts, [task.label_names[int(y)] for y in task.labels])
    joblib.dump(pipe, root / "sentiment.joblib")
    # An ONNX export whose classifier has integer class ids (the names must be given).
    with zipfile.ZipFile(tfidf_packages["trec"]) as zf:
        (root / "questions.onnx").write_bytes(zf.read("model.onnx"))
        (root / "trec-inputs.jsonl").write_bytes(zf.read("inputs.jsonl"))
        trec_names = ",".join(yaml.safe_load(zf.read("learnware.yaml"))["label_names"])
    (root / "trec-names.txt").write_text(trec_names)
    # Plain-text inputs (one per line) for the sentiment and spam sources.
    (root / "sst2.txt").write_text("\n".join(t.replace("\n", " ") for t in task.texts[:64]) + "\n")
    spam = load_task(datasets_dir, "sms_spam", "train", limit=64, seed=1)
    (root / "spam.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in spam.texts))
    return {
        "hf": hf,
        "adapter": adapter,
        "sklearn": root / "sentiment.joblib",
        "onnx": root / "questions.onnx",
        "sst2": root / "sst2.txt",
        "spam": root / "spam.jsonl",
        "trec": root / "trec-inputs.jsonl",
        "trec_names": root / "trec-names.txt",
    }


def package(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(cli, ["package", *args])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, result.stdout, result.stderr


def run_pipeline(runtime: Runtime, job_id: int) -> None:
    """The worker's two learnware stages, in this process, on the job the API queued."""
    assert run_stage(runtime, job_id, VALIDATE_LEARNWARE, pipeline.validate, worker="test") == "done"
    assert run_stage(runtime, job_id, FIT_LEARNWARE_SPEC, pipeline.fit_spec, worker="test") == "done"


def submit_and_run(
    client: TestClient, keys: Keys, runtime: Runtime, zip_path: Path, spec: Path | None = None
) -> dict[str, object]:
    files = {"package": (zip_path.name, zip_path.read_bytes(), "application/zip")}
    if spec is not None:
        files["spec"] = ("spec.safetensors", spec.read_bytes(), "application/octet-stream")
    response = client.post("/v1/learnwares", headers=keys.auth("developer"), files=files)
    assert response.status_code == 202, response.text
    body = response.json()
    run_pipeline(runtime, body["job_id"])
    learnware: dict[str, object] = client.get(
        f"/v1/learnwares/{body['learnware_id']}", headers=keys.auth("developer")
    ).json()
    assert learnware["status"] == "ready", learnware["validation_log"]
    return learnware


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path


CASES = {
    "hf-seqcls": (
        lambda s: [str(s["hf"]), "--inputs", str(s["sst2"]), "--license", "Apache-2.0", "--name", "sst2-hf"],
        "hf-seqcls",
        ["negative", "positive"],
    ),
    "peft-lora": (
        lambda s: [
            str(s["adapter"]),
            "--inputs",
            str(s["spam"]),
            "--license",
            "MIT",
            "--label-names",
            "ham,spam",
            "--tags",
            "spam,sms",
        ],
        "peft-lora",
        ["ham", "spam"],
    ),
    "sklearn": (
        lambda s: [
            str(s["sklearn"]),
            "--inputs",
            str(s["sst2"]),
            "--license",
            "MIT",
            "--description",
            "TF-IDF + logistic regression on movie reviews",
        ],
        "onnx",
        ["negative", "positive"],
    ),
    "onnx": (
        lambda s: [
            str(s["onnx"]),
            "--inputs",
            str(s["trec"]),
            "--license",
            "CC-BY-4.0",
            "--label-names",
            s["trec_names"].read_text(),
        ],
        "onnx",
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_package_output_is_accepted_and_becomes_ready(
    case: str,
    sources: dict[str, Path],
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    workdir: Path,
) -> None:
    make_args, model_format, labels = CASES[case]
    out = workdir / f"{case}.zip"
    code, stdout, stderr = package(*make_args(sources), "--out", str(out))
    assert code == 0, stderr
    assert out.is_file()
    # It says what to run next, runnable as printed.
    assert re.search(rf"pavedock submit {re.escape(str(out))}\n", stdout), stdout
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
    assert not any(n.endswith((".bin", ".pkl", ".joblib")) for n in names), names
    learnware = submit_and_run(client, keys, runtime, out)
    assert learnware["model_format"] == model_format
    if labels is not None:
        assert learnware["label_names"] == labels
    if case == "hf-seqcls":
        assert "training_args.bin" in stdout and "label names from config.json" in stdout
    if case == "peft-lora":
        assert learnware["base_model"] == "all-MiniLM-L6-v2" and learnware["tags"] == ["spam", "sms"]
    if case == "sklearn":
        assert "agrees with your pipeline on 100.0%" in stdout


def test_package_spec_is_fitted_here_and_agrees_with_the_docks(
    sources: dict[str, Path], client: TestClient, keys: Keys, runtime: Runtime, workdir: Path
) -> None:
    code, stdout, stderr = package(*CASES["sklearn"][0](sources), "--spec", "sentiment-spec")
    assert code == 0, stderr
    assert "pavedock submit sentiment.zip --spec sentiment-spec" in stdout
    spec = workdir / "sentiment-spec.safetensors"
    assert spec.is_file() and (workdir / "sentiment-spec.json").is_file()
    learnware = submit_and_run(client, keys, runtime, workdir / "sentiment.zip", spec=spec)
    # The dock refits every spec by default and logs how far the developer's agrees with its own:
    # the spec fitted here with the dock's code on the same inputs agrees fully.
    assert learnware["spec_recomputed"] is True
    agreement = next(line for line in learnware["validation_log"] if "agrees with the recomputed" in line)
    assert float(agreement.rsplit(" ", 1)[1]) > 0.99, agreement


BAD = {
    "no licence": (lambda s: [str(s["sklearn"]), "--inputs", str(s["sst2"])], "--license"),
    "no inputs": (lambda s: [str(s["sklearn"]), "--license", "MIT"], "--inputs"),
    "inputs not JSONL": (
        lambda s: [
            str(s["onnx"]),
            "--inputs",
            str(s["trec_names"].with_suffix(".jsonl")),
            "--license",
            "MIT",
        ],
        "--inputs",
    ),
    "hf: wrong number of labels": (
        lambda s: [str(s["hf"]), "--inputs", str(s["sst2"]), "--license", "MIT", "--label-names", "a,b,c"],
        "give 2 comma-separated names",
    ),
    "peft: unknown base": (
        lambda s: [
            str(s["adapter"]),
            "--inputs",
            str(s["spam"]),
            "--license",
            "MIT",
            "--label-names",
            "ham,spam",
            "--base",
            "bert-large",
        ],
        "all-MiniLM-L6-v2",
    ),
    "peft: no label names": (
        lambda s: [str(s["adapter"]), "--inputs", str(s["spam"]), "--license", "MIT"],
        "--label-names",
    ),
    "sklearn: names not the classes": (
        lambda s: [str(s["sklearn"]), "--inputs", str(s["sst2"]), "--license", "MIT", "--label-names", "a,b"],
        "the pipeline's own class names",
    ),
    "onnx: integer classes, no names": (
        lambda s: [str(s["onnx"]), "--inputs", str(s["trec"]), "--license", "MIT"],
        "--label-names",
    ),
    "onnx: one class predicted": (
        lambda s: [
            str(s["onnx"]),
            "--inputs",
            str(s["trec"].with_name("one-class.txt")),
            "--license",
            "MIT",
            "--label-names",
            s["trec_names"].read_text(),
        ],
        "inputs of every class",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_fails_with_what_to_change(case: str, sources: dict[str, Path], workdir: Path) -> None:
    sources["trec_names"].with_suffix(".jsonl").write_text("not json\n")
    sources["trec"].with_name("one-class.txt").write_text("what is the capital of france ?\n" * 3)
    make_args, fix = BAD[case]
    code, stdout, stderr = package(*make_args(sources), "--out", "bad.zip")
    assert code == 2, stdout + stderr
    assert "error:" in stderr and "fix:" in stderr, stderr
    assert fix in stderr, stderr
    assert "Traceback" not in stdout + stderr
    assert not (workdir / "bad.zip").exists()
    assert not list(workdir.glob(".bad.zip*")), "a partial package was left behind"


def test_a_folder_with_pickled_weights_only_says_how_to_save_safetensors(
    sources: dict[str, Path], tmp_path: Path, workdir: Path
) -> None:
    folder = tmp_path / "old-model"
    folder.mkdir()
    (folder / "config.json").write_text((sources["hf"] / "config.json").read_text())
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04K\x00.")
    code, _, stderr = package(str(folder), "--inputs", str(sources["sst2"]), "--license", "MIT")
    assert code == 2
    assert "pytorch_model.bin" in stderr and "safe_serialization=True" in stderr
    assert not list(workdir.glob("*.zip"))


def test_the_inputs_checked_here_are_the_ones_a_dock_runs() -> None:
    """The slices ``pavedock package`` checks are a dock's defaults, not a copy that can drift."""
    assert Settings.model_fields["validation_inputs"].default == VALIDATION_INPUTS
    assert Settings.model_fields["spec_fit_inputs"].default == SPEC_FIT_INPUTS


def predicted_texts(sources: dict[str, Path], datasets_dir: Path) -> dict[str, list[str]]:
    """sst2 training texts grouped by what the developer's own pipeline predicts on them."""
    pipe = joblib.load(sources["sklearn"])
    texts = [t.replace("\n", " ") for t in load_task(datasets_dir, "sst2", "train", limit=3000, seed=2).texts]
    grouped: dict[str, list[str]] = {}
    for text, label in zip(texts, pipe.predict(texts), strict=True):
        grouped.setdefault(str(label), []).append(text)
    return grouped


def test_inputs_sorted_by_class_fail_here_as_in_the_dock(
    sources: dict[str, Path], datasets_dir: Path, workdir: Path
) -> None:
    """Both classes among all the inputs, but the dock runs the first 512 only: one class there.
    Checking every input would pass here and be refused by the dock's validation."""
    grouped = predicted_texts(sources, datasets_dir)
    assert len(grouped["positive"]) >= VALIDATION_INPUTS
    sorted_inputs = workdir / "sorted.txt"
    sorted_inputs.write_text("\n".join(grouped["positive"][:VALIDATION_INPUTS] + grouped["negative"][:40]))
    code, stdout, stderr = package(
        str(sources["sklearn"]), "--inputs", str(sorted_inputs), "--license", "MIT", "--out", "bad.zip"
    )
    assert code == 2, stdout + stderr
    assert "predicts a single class (positive: 512)" in stderr, stderr
    assert f"first {VALIDATION_INPUTS} of your {VALIDATION_INPUTS + 40} inputs" in stderr
    assert "shuffle" in stderr
    assert not (workdir / "bad.zip").exists()


def test_one_class_where_the_spec_is_fitted_fails_here_as_in_the_dock(
    sources: dict[str, Path], datasets_dir: Path, workdir: Path
) -> None:
    """Validation would see both classes, but the dock fits the spec on the first 256 answers
    and fails the learnware when they are one class: refused here, with what to do."""
    grouped = predicted_texts(sources, datasets_dir)
    inputs = workdir / "late-negatives.txt"
    inputs.write_text("\n".join(grouped["positive"][:SPEC_FIT_INPUTS] + grouped["negative"][:60]))
    code, stdout, stderr = package(
        str(sources["sklearn"]), "--inputs", str(inputs), "--license", "MIT", "--out", "bad.zip"
    )
    assert code == 2, stdout + stderr
    assert (
        f"the dock fits the spec on the first {SPEC_FIT_INPUTS} inputs, where the model predicts positive only"
        in (stderr)
    )
    assert "shuffle" in stderr
    assert not (workdir / "bad.zip").exists()


def test_a_class_missing_where_the_spec_is_fitted_is_a_warning(
    sources: dict[str, Path],
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two of the question classes early, the others late: the dock makes it ready, with a spec
    blind to the late classes; said before the upload."""
    import numpy as np
    import onnxruntime as ort

    # This dock runs what a dock runs by default (the module's settings run fewer, for speed).
    monkeypatch.setattr(runtime.settings, "validation_inputs", VALIDATION_INPUTS)
    monkeypatch.setattr(runtime.settings, "spec_fit_inputs", SPEC_FIT_INPUTS)
    texts = [json.loads(line)["text"] for line in sources["trec"].read_text().splitlines()]
    session = ort.InferenceSession(str(sources["onnx"]), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.array(texts, dtype=object).reshape(-1, 1)}
    predicted = [int(c) for c in session.run(None, feed)[0]]
    names = sources["trec_names"].read_text().split(",")
    common = sorted(set(predicted), key=predicted.count, reverse=True)
    early = [t for t, c in zip(texts, predicted, strict=True) if c in common[:2]]
    late = [t for t, c in zip(texts, predicted, strict=True) if c in common[2:]]
    # The early classes fill the first 256 (repeated if need be), the others follow.
    first = (early * (SPEC_FIT_INPUTS // len(early) + 1))[:SPEC_FIT_INPUTS]
    inputs = workdir / "questions.txt"
    inputs.write_text("\n".join(first + late[:40]))
    code, stdout, stderr = package(
        str(sources["onnx"]), "--inputs", str(inputs), "--license", "MIT", "--label-names", ",".join(names)
    )
    assert code == 0, stderr
    assert (
        f"the spec is fitted on the first {SPEC_FIT_INPUTS} inputs, where the model never predicts" in stdout
    )
    assert names[common[2]] in stdout and "shuffle" in stdout
    submit_and_run(client, keys, runtime, workdir / "questions.zip")


def test_licence_tags_and_description_come_from_the_model_card(
    sources: dict[str, Path], client: TestClient, keys: Keys, runtime: Runtime, workdir: Path
) -> None:
    """A transformers folder with the README.md model card the hub tools write needs no
    --license, --tags or --description; flags, where given, win."""
    import shutil

    from huggingface_hub import ModelCard, ModelCardData

    folder = workdir / "carded-model"
    shutil.copytree(sources["hf"], folder)
    ModelCard.from_template(
        ModelCardData(license="apache-2.0", tags=["sentiment", "generated_from_trainer"]),
        model_description="MiniLM with a linear head, trained on SST-2 movie reviews.",
    ).save(folder / "README.md")
    code, stdout, stderr = package(str(folder), "--inputs", str(sources["sst2"]))
    assert code == 0, stderr
    assert "licence from README.md: Apache-2.0" in stdout and "tags from README.md: sentiment" in stdout
    learnware = submit_and_run(client, keys, runtime, workdir / "carded-model.zip")
    assert learnware["license"] == "Apache-2.0" and learnware["tags"] == ["sentiment"]
    assert learnware["description"] == "MiniLM with a linear head, trained on SST-2 movie reviews."

    code, stdout, stderr = package(
        str(folder),
        "--inputs",
        str(sources["sst2"]),
        "--license",
        "MIT",
        "--tags",
        "mine",
        "--out",
        "own.zip",
    )
    assert code == 0, stderr
    manifest = yaml.safe_load(zipfile.ZipFile(workdir / "own.zip").read("learnware.yaml"))
    assert (manifest["license"], manifest["tags"]) == ("MIT", ["mine"])

    (folder / "README.md").write_text("---\nlibrary_name: transformers\n---\n# carded-model\n")
    code, _, stderr = package(str(folder), "--inputs", str(sources["sst2"]), "--out", "none.zip")
    assert code == 2 and "no licence (none in README.md)" in stderr and "license:" in stderr, stderr


def test_an_onnx_doc_string_is_the_description(sources: dict[str, Path], workdir: Path) -> None:
    import onnx

    model = onnx.load(str(sources["onnx"]))
    model.doc_string = "TF-IDF and logistic regression on TREC questions."
    onnx.save(model, str(workdir / "documented.onnx"))
    code, stdout, stderr = package(
        str(workdir / "documented.onnx"),
        *("--inputs", str(sources["trec"]), "--license", "MIT"),
        *("--label-names", sources["trec_names"].read_text()),
    )
    assert code == 0, stderr
    assert "description from the ONNX doc_string: TF-IDF" in stdout
    manifest = yaml.safe_load(zipfile.ZipFile(workdir / "documented.zip").read("learnware.yaml"))
    assert manifest["description"] == "TF-IDF and logistic regression on TREC questions."


def fit_pooled_linear(datasets_dir: Path, folder: Path) -> list[str]:
    """A linear map after MiniLM's pooling, trained as a developer may: ridge regression from each
    review's pooled embedding onto the frozen base's embedding of its class name (which is what
    the label-name head then reads). Saved with ``save_linear``; returns the label names."""
    import torch

    from app.ml.encoders import embed_texts, load_encoder
    from app.ml.head import LabelNameHead
    from app.ml.pooled_linear import save_linear

    task = load_task(datasets_dir, "sst2", "train", limit=300, seed=3)
    encoder = load_encoder("all-MiniLM-L6-v2")
    x = embed_texts(encoder, task.texts).double()
    names = LabelNameHead.from_names(encoder, task.label_names).embeddings.double()
    y = names[torch.as_tensor(task.labels, dtype=torch.long)]
    # W minimises |x Wᵀ - y|² + λ|W - I|²: the base's reading, bent towards the labelled classes.
    eye = torch.eye(x.shape[1], dtype=torch.float64)
    lam = 1.0
    weight = torch.linalg.solve(x.T @ x + lam * eye, x.T @ y + lam * eye).T
    save_linear(folder, weight.float())
    return list(task.label_names)


def test_a_pooled_linear_folder_is_accepted_and_becomes_ready(
    sources: dict[str, Path],
    datasets_dir: Path,
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    workdir: Path,
) -> None:
    folder = workdir / "review-map"
    names = fit_pooled_linear(datasets_dir, folder)
    args = [
        str(folder),
        "--inputs",
        str(sources["sst2"]),
        "--license",
        "MIT",
        "--label-names",
        ",".join(names),
    ]
    code, _, stderr = package(*args, "--out", "bad.zip")
    assert code == 2 and "a linear map does not say which base" in stderr and "--base" in stderr, stderr
    assert not (workdir / "bad.zip").exists()
    code, stdout, stderr = package(*args, "--base", "all-MiniLM-L6-v2")
    assert code == 0, stderr
    assert re.search(r"pavedock submit review-map\.zip\n", stdout), stdout
    learnware = submit_and_run(client, keys, runtime, workdir / "review-map.zip")
    assert learnware["model_format"] == "pooled-linear" and learnware["base_model"] == "all-MiniLM-L6-v2"
    assert learnware["label_names"] == names


def test_a_package_over_the_upload_limit_is_said_before_the_upload(
    sources: dict[str, Path], client: TestClient, keys: Keys, runtime: Runtime, workdir: Path
) -> None:
    """The one refusal of a dock's request beside duplicates that a package can meet: its size.
    Here a dock with a small limit, and the same limit given to make_package."""
    from app.ml.packaging import DOCK_MAX_UPLOAD_BYTES, PackageRequest, make_package

    assert Settings.model_fields["max_upload_bytes"].default == DOCK_MAX_UPLOAD_BYTES
    limit = 4096
    result = make_package(
        PackageRequest(
            source=sources["sklearn"],
            out=workdir / "big.zip",
            inputs=sources["sst2"],
            license="MIT",
            max_upload_bytes=limit,
        )
    )
    assert result.path.stat().st_size > limit
    assert any(
        n.startswith("warning: the package is") and "PAVEDOCK_MAX_UPLOAD_BYTES" in n for n in result.notes
    )
    runtime.settings.max_upload_bytes = limit  # the dock the warning was for
    files = {"package": ("big.zip", result.path.read_bytes(), "application/zip")}
    response = client.post("/v1/learnwares", headers=keys.auth("developer"), files=files)
    assert response.status_code == 413, response.text
