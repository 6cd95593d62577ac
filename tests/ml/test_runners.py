"""Runners reproduce the models they were built from; builders make working learnwares."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from app.bench.builders import (
    corrupt_labels,
    export_onnx,
    fit_logistic_head,
    fit_tfidf_pipeline,
    pooler_features,
    train_linear_head_learnware,
    train_lora_learnware,
    train_tfidf_onnx_learnware,
)
from app.ml.data import TextTask, load_task
from app.ml.encoders import embed_texts, load_encoder
from app.ml.errors import InvalidInput, InvalidPackage, UnsafePackage
from app.ml.finetune import LoraClassifier
from app.ml.head import LabelNameHead
from app.ml.packages import LearnwarePackage, Manifest, build_package, extract_package, files_under
from app.ml.runners import HfSeqClsRunner, OnnxRunner, PeftLoraRunner, load_runner

from .conftest import CLASSES, make_tiny_bert, make_tiny_task

NAMES = list(CLASSES)


def package_of(
    tmp_path: Path, manifest: dict[str, object], files: dict[str, Path | bytes]
) -> LearnwarePackage:
    full = Manifest.model_validate({"name": "test", "license": "MIT", "label_names": NAMES, **manifest})
    zip_path = build_package(tmp_path / "pkg.zip", full, files)
    return extract_package(zip_path, tmp_path / "pkg")


def folder_package(
    folder: Path, manifest: dict[str, object], files: dict[str, Path | bytes]
) -> LearnwarePackage:
    """A package folder assembled by hand, as the CLI may get one: never checked by extraction."""
    for name, content in files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.read_bytes())
    full = Manifest.model_validate({"name": "test", "license": "MIT", "label_names": NAMES, **manifest})
    return LearnwarePackage(full, folder, [])


def refused_twice(
    tmp_path: Path,
    manifest: dict[str, object],
    files: dict[str, Path | bytes],
    error: type[Exception],
    match: str,
) -> None:
    """Refused when the zip is extracted (in the request), and by the runner on a hand-made folder."""
    with pytest.raises(error, match=match):
        package_of(tmp_path / "zip", manifest, files)
    assert not (tmp_path / "zip" / "pkg").exists()
    with pytest.raises(error, match=match):
        load_runner(folder_package(tmp_path / "folder", manifest, files))


def accuracy(runner_labels: np.ndarray, task: TextTask) -> float:
    return float(np.mean(runner_labels == task.labels))


# --- peft-lora ---------------------------------------------------------------------------------


def write_adapter(base: str | Path, folder: Path, *, rank: int = 4, seed: int = 0) -> PeftModel:
    """A LoRA adapter with random, non-zero B on ``base``, saved as safetensors."""
    encoder = load_encoder(base, fresh=True)
    torch.manual_seed(seed)
    model = get_peft_model(encoder.model, LoraConfig(r=rank, lora_alpha=8, target_modules=["query", "value"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    folder.mkdir(parents=True, exist_ok=True)
    model.peft_config["default"].save_pretrained(str(folder))
    save_file(
        {k: v.contiguous() for k, v in get_peft_model_state_dict(model).items()},
        str(folder / "adapter_model.safetensors"),
    )
    return model.eval()


def lora_package(tmp_path: Path, base: str, adapter: Path) -> LearnwarePackage:
    return package_of(
        tmp_path,
        {"model_format": "peft-lora", "base_model": base},
        dict(files_under(adapter, "adapter")),
    )


def test_lora_runner_matches_the_adapted_model(
    tmp_path: Path, tiny_base: str, tiny_test_task: TextTask
) -> None:
    model = write_adapter(tiny_base, tmp_path / "adapter")
    encoder = load_encoder(tiny_base, fresh=True)
    head = LabelNameHead.from_names(encoder, NAMES)
    expected = torch.softmax(
        head.logits(embed_texts(encoder, tiny_test_task.texts, model=model)), dim=-1
    ).numpy()
    frozen = torch.softmax(head.logits(embed_texts(encoder, tiny_test_task.texts)), dim=-1).numpy()
    assert not np.allclose(expected, frozen, atol=1e-3)  # the adapter changes the model

    runner = load_runner(lora_package(tmp_path, tiny_base, tmp_path / "adapter"))
    assert isinstance(runner, PeftLoraRunner)
    predictions = runner.predict(tiny_test_task.texts, batch_size=7)
    assert predictions.probs is not None
    np.testing.assert_allclose(predictions.probs, expected, atol=1e-5)
    np.testing.assert_array_equal(predictions.labels, expected.argmax(axis=1))
    assert runner.label_names == NAMES


def test_lora_builder_is_deterministic_and_runs_as_peft_loads_it(
    tmp_path: Path, tiny_base: str, tiny_task: TextTask
) -> None:
    zip_path = train_lora_learnware(tiny_task, tmp_path / "lora.zip", base=tiny_base, steps=3, seed=3)
    again = train_lora_learnware(tiny_task, tmp_path / "again.zip", base=tiny_base, steps=3, seed=3)
    assert zip_path.read_bytes() == again.read_bytes()
    package = extract_package(zip_path, tmp_path / "pkg")
    config = json.loads((package.model_path / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == tiny_base and config["r"] == 8
    assert sorted(config["target_modules"]) == ["query", "value"]
    ours = load_runner(package).predict(tiny_task.texts)
    reference = LoraClassifier.load(tiny_base, package.model_path).predict_proba(tiny_task.texts, NAMES)
    assert ours.probs is not None
    np.testing.assert_allclose(ours.probs, reference, atol=1e-5)


def test_lora_runner_refuses_an_unregistered_base(tmp_path: Path, tiny_base: str) -> None:
    write_adapter(tiny_base, tmp_path / "adapter")
    package = lora_package(tmp_path, tiny_base, tmp_path / "adapter")
    manifest = package.manifest.model_copy(update={"base_model": "unknown-base"})
    with pytest.raises(InvalidPackage, match="'unknown-base' is not a registered base"):
        PeftLoraRunner(LearnwarePackage(manifest, package.root, []))


def test_lora_runner_refuses_adapters_of_another_shape(tmp_path: Path, tiny_base: str) -> None:
    wider = make_tiny_bert(tmp_path / "wide-base", hidden=48)
    write_adapter(wider, tmp_path / "adapter")
    package = lora_package(tmp_path, tiny_base, tmp_path / "adapter")
    with pytest.raises(InvalidPackage, match=r"has shape \(4, 48\), the base needs \(4, 32\)"):
        load_runner(package)


def _edit_adapter(
    folder: Path, *, config: dict[str, object] | None = None, drop: bool = False, add: bool = False
) -> None:
    if config is not None:
        path = folder / "adapter_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    state = load_file(str(folder / "adapter_model.safetensors"))
    if drop:
        state.pop(sorted(state)[0])
    if add:
        state["base_model.model.pooler.dense.lora_A.weight"] = torch.zeros(4, 32)
    save_file(state, str(folder / "adapter_model.safetensors"))


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"drop": True}, "adapter lacks 1 tensors"),
        ({"add": True}, "the base has no place for"),
        ({"config": {"peft_type": "PREFIX_TUNING"}}, "only LORA is supported"),
        ({"config": {"modules_to_save": ["classifier"]}}, "modules_to_save"),
        ({"config": {"target_modules": ["no_such_layer"]}}, "does not fit base"),
    ],
)
def test_lora_runner_refuses_bad_adapters(
    tmp_path: Path, tiny_base: str, edit: dict[str, object], match: str
) -> None:
    write_adapter(tiny_base, tmp_path / "adapter")
    _edit_adapter(tmp_path / "adapter", **edit)  # type: ignore[arg-type]
    with pytest.raises(InvalidPackage, match=match):
        load_runner(lora_package(tmp_path, tiny_base, tmp_path / "adapter"))


# --- hf-seqcls ---------------------------------------------------------------------------------


def write_seqcls(base_dir: Path, folder: Path, num_labels: int = 3) -> BertForSequenceClassification:
    torch.manual_seed(1)
    model = BertForSequenceClassification.from_pretrained(base_dir, num_labels=num_labels).eval()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(folder)
    return model


def test_seqcls_runner_matches_the_model(
    tmp_path: Path, tiny_base_dir: Path, tiny_test_task: TextTask
) -> None:
    model = write_seqcls(tiny_base_dir, tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    with torch.no_grad():
        enc = tokenizer(tiny_test_task.texts, padding=True, return_tensors="pt")
        expected = torch.softmax(model(**enc).logits, dim=-1).numpy()
    runner = load_runner(
        package_of(tmp_path, {"model_format": "hf-seqcls"}, dict(files_under(tmp_path / "model", "model")))
    )
    assert isinstance(runner, HfSeqClsRunner)
    predictions = runner.predict(tiny_test_task.texts, batch_size=4)
    assert predictions.probs is not None
    np.testing.assert_allclose(predictions.probs, expected, atol=1e-5)
    np.testing.assert_array_equal(predictions.labels, expected.argmax(axis=1))


def test_seqcls_runner_refuses_missing_classifier_weights(tmp_path: Path, tiny_base_dir: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(tiny_base_dir, folder)  # a bare BertModel: no classifier weights
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**config, "id2label": {str(i): n for i, n in enumerate(NAMES)}})
    )
    package = package_of(tmp_path, {"model_format": "hf-seqcls"}, dict(files_under(folder, "model")))
    with pytest.raises(InvalidPackage, match=r"missing keys, e\.g\. classifier"):
        load_runner(package)


@pytest.mark.parametrize(
    ("config", "labels", "match"),
    [
        ({"model_type": "my-custom-arch"}, NAMES, "'my-custom-arch' is not built into transformers"),
        ({"model_type": "clip"}, NAMES, "no sequence-classification model for type 'clip'"),
        ({"problem_type": "multi_label_classification"}, NAMES, "not single-label"),
        ({}, ["yes", "no"], "3 output classes, the manifest names 2"),
    ],
)
def test_seqcls_runner_refuses(
    tmp_path: Path, tiny_base_dir: Path, config: dict[str, object], labels: list[str], match: str
) -> None:
    write_seqcls(tiny_base_dir, tmp_path / "model")
    path = tmp_path / "model" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    refused_twice(
        tmp_path,
        {"model_format": "hf-seqcls", "label_names": labels},
        dict(files_under(tmp_path / "model", "model")),
        InvalidPackage,
        match,
    )


def test_seqcls_runner_refuses_remote_code_even_past_extraction(tmp_path: Path, tiny_base_dir: Path) -> None:
    write_seqcls(tiny_base_dir, tmp_path / "model")
    package = package_of(
        tmp_path, {"model_format": "hf-seqcls"}, dict(files_under(tmp_path / "model", "model"))
    )
    path = package.model_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "auto_map": {"AutoModel": "m.M"}}))
    with pytest.raises(UnsafePackage, match="auto_map"):
        load_runner(package)


# --- onnx --------------------------------------------------------------------------------------


@pytest.mark.parametrize("zipmap", [False, True])
def test_onnx_probabilities_match_sklearn(
    tmp_path: Path, tiny_task: TextTask, tiny_test_task: TextTask, zipmap: bool
) -> None:
    pipeline = fit_tfidf_pipeline(tiny_task.texts, tiny_task.labels)
    package = package_of(
        tmp_path, {"model_format": "onnx"}, {"model.onnx": export_onnx(pipeline, zipmap=zipmap)}
    )
    runner = load_runner(package)
    assert isinstance(runner, OnnxRunner) and runner.zipmap is zipmap
    predictions = runner.predict(tiny_test_task.texts, batch_size=8)
    assert predictions.probs is not None
    np.testing.assert_allclose(predictions.probs, pipeline.predict_proba(tiny_test_task.texts), atol=1e-5)
    np.testing.assert_array_equal(predictions.labels, pipeline.predict(tiny_test_task.texts))


@pytest.mark.parametrize("zipmap", [False, True])
def test_onnx_string_labels_follow_the_manifest_order(
    tmp_path: Path, tiny_task: TextTask, tiny_test_task: TextTask, zipmap: bool
) -> None:
    # sklearn sorts string classes (food, music, sports); the manifest says sports, food, music.
    pipeline = fit_tfidf_pipeline(tiny_task.texts, np.asarray(NAMES)[tiny_task.labels])
    package = package_of(
        tmp_path, {"model_format": "onnx"}, {"model.onnx": export_onnx(pipeline, zipmap=zipmap)}
    )
    predictions = load_runner(package).predict(tiny_test_task.texts)
    order = [list(pipeline.classes_).index(n) for n in NAMES]
    assert predictions.probs is not None
    np.testing.assert_allclose(
        predictions.probs, pipeline.predict_proba(tiny_test_task.texts)[:, order], atol=1e-5
    )
    assert [NAMES[i] for i in predictions.labels] == list(pipeline.predict(tiny_test_task.texts))


def test_onnx_probabilities_match_sklearn_on_real_text(tmp_path: Path, datasets_dir: Path) -> None:
    train = load_task(datasets_dir, "tweet_emotion", "train", limit=1500)
    test = load_task(datasets_dir, "tweet_emotion", "test", limit=400)
    pipeline = fit_tfidf_pipeline(train.texts, train.labels)
    manifest = {"model_format": "onnx", "label_names": train.label_names}
    runner = load_runner(package_of(tmp_path, manifest, {"model.onnx": export_onnx(pipeline)}))
    predictions = runner.predict(test.texts, batch_size=128)
    assert predictions.probs is not None
    np.testing.assert_allclose(predictions.probs, pipeline.predict_proba(test.texts), atol=1e-5)
    np.testing.assert_array_equal(predictions.labels, pipeline.predict(test.texts))


def _onnx_bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


def test_onnx_runner_refuses_a_non_string_input(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["probabilities"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    package = package_of(tmp_path, {"model_format": "onnx"}, {"model.onnx": _onnx_bytes(model)})
    with pytest.raises(InvalidPackage, match="one string tensor input"):
        load_runner(package)


def test_onnx_runner_refuses_external_data_and_custom_ops(tmp_path: Path) -> None:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3], [0.0, 0.0, 0.0])
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("float_data")
    weight.external_data.add(key="location", value="../../../etc/passwd")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    refused_twice(
        tmp_path / "ext", {"model_format": "onnx"}, {"model.onnx": _onnx_bytes(model)}, UnsafePackage, "'..'"
    )

    custom = helper.make_graph(
        [helper.make_node("Evil", ["x"], ["y"], domain="ai.onnx.contrib")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None])],
    )
    model = helper.make_model(
        custom, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
    )
    refused_twice(
        tmp_path / "custom",
        {"model_format": "onnx"},
        {"model.onnx": _onnx_bytes(model)},
        InvalidPackage,
        r"custom domain 'ai\.onnx\.contrib'",
    )


def test_onnx_runner_refuses_garbage(tmp_path: Path) -> None:
    refused_twice(
        tmp_path, {"model_format": "onnx"}, {"model.onnx": b"\x08\x07garbage"}, InvalidPackage, r"model\.onnx"
    )


def test_runner_checks_its_inputs(tmp_path: Path, tiny_task: TextTask) -> None:
    pipeline = fit_tfidf_pipeline(tiny_task.texts, tiny_task.labels)
    runner = load_runner(
        package_of(tmp_path, {"model_format": "onnx"}, {"model.onnx": export_onnx(pipeline)})
    )
    with pytest.raises(InvalidInput, match="no texts"):
        runner.predict([])
    with pytest.raises(InvalidInput, match="text 1 is empty"):
        runner.predict(["game team", "  "])
    with pytest.raises(InvalidInput, match="batch_size"):
        runner.predict(["game team"], batch_size=0)


# --- builders ----------------------------------------------------------------------------------


def test_corrupt_labels_replaces_that_share_with_wrong_labels() -> None:
    labels = np.arange(100) % 4
    corrupted = corrupt_labels(labels, 0.8, 4, seed=0)
    assert int(np.sum(corrupted != labels)) == 80
    assert set(np.unique(corrupted)) <= {0, 1, 2, 3}
    np.testing.assert_array_equal(corrupted, corrupt_labels(labels, 0.8, 4, seed=0))
    np.testing.assert_array_equal(corrupt_labels(labels, 0.0, 4, seed=0), labels)
    with pytest.raises(InvalidInput, match="within"):
        corrupt_labels(labels, 1.5, 4, seed=0)


def built(zip_path: Path, tmp_path: Path) -> tuple[LearnwarePackage, np.ndarray]:
    package = extract_package(zip_path, tmp_path / zip_path.stem)
    return package, load_runner(package).predict(make_tiny_task(n_per_class=10, seed=1).texts).labels


def test_lora_builder_learns_and_corruption_hurts(
    tmp_path: Path, tiny_base: str, tiny_task: TextTask, tiny_test_task: TextTask
) -> None:
    good = train_lora_learnware(tiny_task, tmp_path / "good.zip", base=tiny_base, steps=40, lr=3e-2, seed=0)
    bad = train_lora_learnware(
        tiny_task, tmp_path / "bad.zip", base=tiny_base, steps=40, lr=3e-2, seed=0, corrupt=0.8
    )
    package, good_labels = built(good, tmp_path)
    _, bad_labels = built(bad, tmp_path)
    assert package.manifest.model_format == "peft-lora" and package.manifest.base_model == tiny_base
    assert package.manifest.name == "tiny-topics-lora-good-s0"
    assert package.inputs == tiny_task.texts  # fewer than 256: all of them
    assert accuracy(good_labels, tiny_test_task) >= 0.9
    assert accuracy(bad_labels, tiny_test_task) < accuracy(good_labels, tiny_test_task) - 0.4


@pytest.mark.parametrize("classes", [3, 2])
def test_linear_head_builder_copies_logistic_regression_exactly(
    tmp_path: Path, tiny_base: str, tiny_task: TextTask, tiny_test_task: TextTask, classes: int
) -> None:
    keep = np.flatnonzero(tiny_task.labels < classes)
    task = TextTask(
        "tiny", "train", [tiny_task.texts[i] for i in keep], tiny_task.labels[keep], NAMES[:classes]
    )
    zip_path = train_linear_head_learnware(task, tmp_path / "linear.zip", base=tiny_base, seed=0)
    package = extract_package(zip_path, tmp_path / "pkg")
    predictions = load_runner(package).predict(tiny_test_task.texts)

    model = BertForSequenceClassification.from_pretrained(package.model_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(package.model_path)
    weight, bias = fit_logistic_head(pooler_features(model, tokenizer, task.texts), task.labels, classes)
    logits = pooler_features(model, tokenizer, tiny_test_task.texts) @ weight.T + bias
    expected = np.exp(logits - logits.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    assert predictions.probs is not None
    np.testing.assert_allclose(predictions.probs, expected, atol=1e-4)
    assert isinstance(model.config, BertConfig) and model.config.id2label == dict(enumerate(NAMES[:classes]))


def test_linear_head_builder_is_deterministic(tmp_path: Path, tiny_base: str, tiny_task: TextTask) -> None:
    first = train_linear_head_learnware(tiny_task, tmp_path / "a.zip", base=tiny_base, seed=0)
    second = train_linear_head_learnware(tiny_task, tmp_path / "b.zip", base=tiny_base, seed=0)
    assert first.read_bytes() == second.read_bytes()


def test_tfidf_builder_good_beats_corrupted_and_is_deterministic(tmp_path: Path, datasets_dir: Path) -> None:
    train = load_task(datasets_dir, "sst2", "train", limit=1000)
    test = load_task(datasets_dir, "sst2", "test", limit=300)
    good = train_tfidf_onnx_learnware(train, tmp_path / "good.zip", seed=0)
    again = train_tfidf_onnx_learnware(train, tmp_path / "again.zip", seed=0)
    bad = train_tfidf_onnx_learnware(train, tmp_path / "bad.zip", seed=0, corrupt=0.8, zipmap=True)
    assert good.read_bytes() == again.read_bytes()
    accuracies = {}
    for path in (good, bad):
        package = extract_package(path, tmp_path / path.stem)
        assert len(package.inputs) == 256 and set(package.inputs) <= set(train.texts)
        accuracies[path.stem] = accuracy(load_runner(package).predict(test.texts).labels, test)
    assert accuracies["good"] > 0.65
    assert accuracies["bad"] < accuracies["good"] - 0.2


def test_lora_builder_refuses_an_unregistered_base(
    tmp_path: Path, tiny_base_dir: Path, tiny_task: TextTask
) -> None:
    with pytest.raises(InvalidInput, match="not a registered alias"):
        train_lora_learnware(tiny_task, tmp_path / "x.zip", base=str(tiny_base_dir), steps=1)
    assert not (tmp_path / "x.zip").exists()


@pytest.mark.real_model
def test_real_minilm_learnwares_run_as_built(tmp_path: Path, datasets_dir: Path) -> None:
    """LoRA and linear-head learnwares on the real base: the runner agrees with peft's loader,
    and the clean linear head beats its corrupted twin on sst2."""
    test = load_task(datasets_dir, "sst2", "test", limit=100)
    shots = load_task(datasets_dir, "sst2", "train", limit=64)
    lora = train_lora_learnware(shots, tmp_path / "lora.zip", steps=2, seed=0)
    package = extract_package(lora, tmp_path / "lora")
    ours = load_runner(package).predict(test.texts[:32])
    reference = LoraClassifier.load("all-MiniLM-L6-v2", package.model_path).predict_proba(
        test.texts[:32], shots.label_names
    )
    assert ours.probs is not None
    np.testing.assert_allclose(ours.probs, reference, atol=1e-4)

    # The pooler output is a weak feature on little data; 400 examples separate good from corrupted.
    train = load_task(datasets_dir, "sst2", "train", limit=400)
    scores = {}
    for corrupt in (0.0, 0.8):
        path = train_linear_head_learnware(train, tmp_path / f"linear-{corrupt}.zip", seed=0, corrupt=corrupt)
        runner = load_runner(extract_package(path, tmp_path / f"linear-{corrupt}"))
        scores[corrupt] = accuracy(runner.predict(test.texts).labels, test)
    assert scores[0.0] >= 0.55 and scores[0.8] < scores[0.0] - 0.15


def test_seqcls_config_values_of_the_wrong_type_are_the_packages_fault(
    tmp_path: Path, tiny_base_dir: Path
) -> None:
    """transformers raises TypeError (or its own validation error) for these: refused in words."""
    write_seqcls(tiny_base_dir, tmp_path / "model")
    path = tmp_path / "model" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "hidden_size": "32"}))
    files = dict(files_under(tmp_path / "model", "model"))
    refused_twice(tmp_path, {"model_format": "hf-seqcls"}, files, InvalidPackage, "hidden_size")
