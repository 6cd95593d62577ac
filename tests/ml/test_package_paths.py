"""No loader opens a file the package did not bring: every path a model format names, for each runner.

Each escape is tried twice: in a zip (refused when it is extracted, which the API does in the
request) and in a folder assembled by hand (refused by the runner itself), where a symbolic
link can also be tried. Legitimate uses of the same features (a sharded checkpoint, ONNX data
beside the model) still load.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from app.ml.data import TextTask
from app.ml.errors import InvalidPackage, UnsafePackage
from app.ml.package_content import check_onnx_model
from app.ml.packages import files_under
from app.ml.runners import load_runner
from app.ml.runners.onnx_model import _inline_external_data

from .test_runners import (
    folder_package,
    lora_package,
    package_of,
    refused_twice,
    write_adapter,
    write_seqcls,
)

SEQCLS = {"model_format": "hf-seqcls"}
INDEX = "model/model.safetensors.index.json"


@pytest.fixture
def seqcls_files(tmp_path: Path, tiny_base_dir: Path) -> dict[str, Path | bytes]:
    """A tiny sequence classifier's files, its weights as one shard named by an index."""
    folder = tmp_path / "model"
    write_seqcls(tiny_base_dir, folder)
    weights = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    index = {"metadata": {}, "weight_map": dict.fromkeys(weights, "model-00001-of-00001.safetensors")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return dict(files_under(folder, "model"))


def with_weight_map(files: dict[str, Path | bytes], shard: str) -> dict[str, Path | bytes]:
    """The package with every weight mapped to ``shard`` (its own shard left in place)."""
    index = json.loads(Path(files[INDEX]).read_text())  # type: ignore[arg-type]
    index["weight_map"] = dict.fromkeys(index["weight_map"], shard)
    return {**files, INDEX: json.dumps(index).encode()}


def test_a_sharded_checkpoint_inside_the_package_loads(
    tmp_path: Path, tiny_base_dir: Path, seqcls_files: dict[str, Path | bytes], tiny_test_task: TextTask
) -> None:
    model = write_seqcls(tiny_base_dir, tmp_path / "same")  # the same seed: the same classifier
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "same")
    with torch.no_grad():
        enc = tokenizer(tiny_test_task.texts, padding=True, return_tensors="pt")
        expected = torch.softmax(model(**enc).logits, dim=-1).numpy()
    predictions = load_runner(package_of(tmp_path / "ok", SEQCLS, seqcls_files)).predict(tiny_test_task.texts)
    assert predictions.probs is not None
    np.testing.assert_allclose(predictions.probs, expected, atol=1e-5)


def test_weight_map_to_an_absolute_host_path_is_refused(
    tmp_path: Path, tiny_base_dir: Path, seqcls_files: dict[str, Path | bytes]
) -> None:
    # The attack of issue 14: the encoder's weights taken from a model that lies on the host.
    host_weights = str((tiny_base_dir / "model.safetensors").resolve())
    refused_twice(tmp_path, SEQCLS, with_weight_map(seqcls_files, host_weights), UnsafePackage, "is absolute")


def test_weight_map_climbing_out_with_dotdot_is_refused(
    tmp_path: Path, seqcls_files: dict[str, Path | bytes]
) -> None:
    refused_twice(
        tmp_path, SEQCLS, with_weight_map(seqcls_files, "../../outside.safetensors"), UnsafePackage, "'..'"
    )


def test_weight_map_to_a_symbolic_link_out_of_the_package_is_refused(
    tmp_path: Path, tiny_base_dir: Path, seqcls_files: dict[str, Path | bytes]
) -> None:
    package = folder_package(tmp_path / "folder", SEQCLS, with_weight_map(seqcls_files, "linked.safetensors"))
    (package.model_path / "linked.safetensors").symlink_to(tiny_base_dir / "model.safetensors")
    with pytest.raises(UnsafePackage, match="symbolic link"):
        load_runner(package)


@pytest.mark.parametrize(
    ("shard", "error", "match"),
    [
        ("missing.safetensors", InvalidPackage, "not in the package"),
        ("tokenizer.json", UnsafePackage, "safetensors files only"),
    ],
)
def test_weight_map_to_a_missing_or_foreign_file_is_refused(
    tmp_path: Path, seqcls_files: dict[str, Path | bytes], shard: str, error: type[Exception], match: str
) -> None:
    refused_twice(tmp_path, SEQCLS, with_weight_map(seqcls_files, shard), error, match)


def test_weight_map_naming_tensors_the_shard_lacks_is_refused(
    tmp_path: Path, seqcls_files: dict[str, Path | bytes]
) -> None:
    index = json.loads(Path(seqcls_files[INDEX]).read_text())  # type: ignore[arg-type]
    index["weight_map"]["bert.extra.weight"] = "model-00001-of-00001.safetensors"
    files = {**seqcls_files, INDEX: json.dumps(index).encode()}
    refused_twice(tmp_path, SEQCLS, files, InvalidPackage, "'bert.extra.weight'.*does not hold it")


@pytest.mark.parametrize(
    ("entry", "error", "match"),
    [
        ({"vocab_file": "/etc/passwd"}, UnsafePackage, r"vocab_file names '/etc/passwd', which is absolute"),
        ({"tokenizer_file": "../../tokenizer.json"}, UnsafePackage, "tokenizer_file.*'..'"),
        ({"fast_tokenizer_files": ["../x/tokenizer.9.json"]}, UnsafePackage, "fast_tokenizer_files.*'..'"),
        ({"merges_file": "merges.txt"}, InvalidPackage, "merges_file names 'merges.txt', which is not in"),
    ],
)
def test_tokenizer_config_naming_files_outside_is_refused(
    tmp_path: Path,
    seqcls_files: dict[str, Path | bytes],
    entry: dict[str, object],
    error: type[Exception],
    match: str,
) -> None:
    name = "model/tokenizer_config.json"
    config = {**json.loads(Path(seqcls_files[name]).read_text()), **entry}  # type: ignore[arg-type]
    refused_twice(tmp_path, SEQCLS, {**seqcls_files, name: json.dumps(config).encode()}, error, match)


def test_an_adapter_inside_a_transformers_folder_is_refused(
    tmp_path: Path, tiny_base_dir: Path, seqcls_files: dict[str, Path | bytes]
) -> None:
    """transformers applies a folder's adapter_config.json and may load the base it names."""
    adapter = json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(tiny_base_dir)}).encode()
    files = {**seqcls_files, "model/adapter_config.json": adapter}
    refused_twice(tmp_path, SEQCLS, files, InvalidPackage, "would apply this adapter")


# --- peft-lora -----------------------------------------------------------------------------------


def test_lora_weights_linked_out_of_the_package_are_refused(tmp_path: Path, tiny_base: str) -> None:
    write_adapter(tiny_base, tmp_path / "host-adapter")
    write_adapter(tiny_base, tmp_path / "adapter", seed=1)
    package = lora_package(tmp_path, tiny_base, tmp_path / "adapter")
    weights = package.model_path / "adapter_model.safetensors"
    weights.unlink()
    weights.symlink_to(tmp_path / "host-adapter" / "adapter_model.safetensors")
    with pytest.raises(UnsafePackage, match="symbolic link"):
        load_runner(package)


def test_lora_base_path_in_the_adapter_config_is_never_followed(
    tmp_path: Path, tiny_base: str, tiny_base_dir: Path, tiny_test_task: TextTask
) -> None:
    """The adapter applies to the manifest's registered base, whatever path its config names."""
    from .conftest import make_tiny_bert

    write_adapter(tiny_base, tmp_path / "adapter")
    expected = load_runner(lora_package(tmp_path / "a", tiny_base, tmp_path / "adapter"))
    wider = make_tiny_bert(tmp_path / "wider-host-model", hidden=48)  # would not fit the adapter
    config_path = tmp_path / "adapter" / "adapter_config.json"
    config_path.write_text(
        json.dumps({**json.loads(config_path.read_text()), "base_model_name_or_path": str(wider)})
    )
    runner = load_runner(lora_package(tmp_path / "b", tiny_base, tmp_path / "adapter"))
    ours, theirs = runner.predict(tiny_test_task.texts[:6]), expected.predict(tiny_test_task.texts[:6])
    assert ours.probs is not None and theirs.probs is not None
    np.testing.assert_allclose(ours.probs, theirs.probs, atol=1e-6)


def test_lora_weights_declaring_an_overflowing_shape_are_refused(tmp_path: Path, tiny_base: str) -> None:
    write_adapter(tiny_base, tmp_path / "adapter")
    weights = tmp_path / "adapter" / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    key = sorted(tensors)[0]
    save_file({**tensors, key: torch.zeros(0)}, str(weights))
    raw = weights.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    header[key]["shape"] = [2**32, 2**32]  # 2**64 elements: 0 in 64-bit arithmetic
    text = json.dumps(header).encode()
    weights.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + length :])
    files = dict(files_under(tmp_path / "adapter", "adapter"))
    refused_twice(
        tmp_path / "pkg",
        {"model_format": "peft-lora", "base_model": tiny_base},
        files,
        InvalidPackage,
        "over the limit",
    )


# --- onnx ----------------------------------------------------------------------------------------


def external_model(location: str, offset: int = 0, length: int = 12) -> onnx.ModelProto:
    """y = x + w, with w's three floats stored at ``location``."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3], [0.0, 0.0, 0.0])
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


WEIGHTS = np.asarray([1.0, 2.0, 3.0], dtype="<f4").tobytes()


def test_onnx_external_data_inside_the_package_is_read_from_there(tmp_path: Path) -> None:
    files: dict[str, Path | bytes] = {
        "model.onnx": external_model("weights.data", offset=4, length=12).SerializeToString(),
        "weights.data": b"\0\0\0\0" + WEIGHTS,
    }
    package = package_of(tmp_path, {"model_format": "onnx"}, files)
    model = onnx.load(str(package.model_path), load_external_data=False)
    check_onnx_model(model, package.root, package.root)
    _inline_external_data(model, package.root, package.root)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(["y"], {"x": np.zeros(3, dtype=np.float32)})
    np.testing.assert_array_equal(y, [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("location", "error", "match"),
    [
        ("/etc/passwd", UnsafePackage, "'/etc/passwd', which is absolute"),
        ("../../weights.data", UnsafePackage, "'..'"),
        ("nowhere.data", InvalidPackage, "not in the package"),
    ],
)
def test_onnx_external_data_outside_the_package_is_refused(
    tmp_path: Path, location: str, error: type[Exception], match: str
) -> None:
    files: dict[str, Path | bytes] = {"model.onnx": external_model(location).SerializeToString()}
    refused_twice(tmp_path, {"model_format": "onnx"}, files, error, match)


def test_onnx_external_data_past_the_end_of_its_file_is_refused(tmp_path: Path) -> None:
    files: dict[str, Path | bytes] = {
        "model.onnx": external_model("weights.data", offset=8, length=12).SerializeToString(),
        "weights.data": WEIGHTS,
    }
    refused_twice(tmp_path, {"model_format": "onnx"}, files, InvalidPackage, "reads bytes 8..20")


def test_onnx_external_data_through_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    host = tmp_path / "host-weights.data"
    host.write_bytes(WEIGHTS)
    package = folder_package(
        tmp_path / "folder",
        {"model_format": "onnx"},
        {"model.onnx": external_model("weights.data").SerializeToString()},
    )
    (package.root / "weights.data").symlink_to(host)
    with pytest.raises(UnsafePackage, match="symbolic link"):
        load_runner(package)


def test_onnx_custom_operator_set_is_refused_at_extraction(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [None, 1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.evil.ops", 1)]
    )
    files: dict[str, Path | bytes] = {"model.onnx": model.SerializeToString()}
    refused_twice(tmp_path, {"model_format": "onnx"}, files, InvalidPackage, "custom domain 'com.evil.ops'")


def test_onnx_outputs_of_the_wrong_length_are_the_packages_fault(tmp_path: Path) -> None:
    """A graph that ignores its input and returns three labels whatever it is given."""
    constant = helper.make_tensor("labels", TensorProto.INT64, [3], [0, 1, 0])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["label"], value=constant)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [None, 1])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    runner = load_runner(
        package_of(tmp_path, {"model_format": "onnx"}, {"model.onnx": model.SerializeToString()})
    )
    with pytest.raises(InvalidPackage, match=r"returned labels of shape \(3,\) for 2 texts"):
        runner.predict(["one", "two"])
