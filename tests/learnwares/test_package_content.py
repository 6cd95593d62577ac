"""A package's content is checked in the request, before the 202: what its files name (weight
maps, ONNX external data), the shapes its safetensors headers declare, its ONNX operator
domains and how much it unpacks to. Each is a 422 with the reason, and nothing is stored.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import onnx
import pytest
import torch
from fastapi.testclient import TestClient
from onnx import TensorProto, helper
from safetensors.torch import load_file
from transformers import BertConfig, BertForSequenceClassification

from app.ml.packages import Manifest, build_package, files_under, inputs_jsonl
from app.runtime import Runtime
from tests.fixtures.service import Keys, submit
from tests.learnwares.test_learnwares import assert_nothing_stored, rebuild_zip
from tests.ml.conftest import make_tiny_bert

SHARD = "model-00001-of-00001.safetensors"


@pytest.fixture(scope="module")
def tiny_seqcls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny two-class BERT classifier package whose weights are one shard named by an index,
    and the folder of a model lying on the host (the weights an attacker would point at)."""
    root = tmp_path_factory.mktemp("seqcls")
    host = make_tiny_bert(root / "host-model")
    torch.manual_seed(0)
    folder = root / "model"
    config = BertConfig.from_pretrained(host, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (host / name).exists():
            (folder / name).write_bytes((host / name).read_bytes())
    weights = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").rename(folder / SHARD)
    index = {"metadata": {}, "weight_map": dict.fromkeys(weights, SHARD)}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    manifest = Manifest.model_validate(
        {
            "name": "tiny-seqcls",
            "label_names": ["negative", "positive"],
            "model_format": "hf-seqcls",
            "license": "MIT",
            "inputs": "inputs.jsonl",
        }
    )
    files = {**files_under(folder, "model"), "inputs.jsonl": inputs_jsonl(["a good game", "a bad song"])}
    return build_package(root / "seqcls.zip", manifest, files), host


def with_weight_map(package: Path, shard: str) -> bytes:
    with zipfile.ZipFile(package) as zf:
        index = json.loads(zf.read("model/model.safetensors.index.json"))
    index["weight_map"] = dict.fromkeys(index["weight_map"], shard)
    return rebuild_zip(
        package,
        drop=("model/model.safetensors.index.json",),
        add=[("model/model.safetensors.index.json", json.dumps(index).encode())],
    )


def assert_refused(response, code: str, reason: str, runtime: Runtime) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert reason in error["message"]
    assert_nothing_stored(runtime)


def test_the_sharded_package_itself_is_accepted(
    client: TestClient, keys: Keys, tiny_seqcls: tuple[Path, Path]
) -> None:
    assert submit(client, keys, tiny_seqcls[0]).status_code == 202


@pytest.mark.parametrize(
    ("shard", "code", "reason"),
    [
        ("HOST", "unsafe_package", "which is absolute"),
        ("../../host-model/model.safetensors", "unsafe_package", "climbs out of the package"),
        ("/etc/passwd", "unsafe_package", "which is absolute"),
        ("elsewhere.safetensors", "invalid_package", "not in the package"),
    ],
)
def test_a_weight_map_pointing_outside_the_package_is_refused_in_the_request(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    tiny_seqcls: tuple[Path, Path],
    shard: str,
    code: str,
    reason: str,
) -> None:
    package, host = tiny_seqcls
    target = str((host / "model.safetensors").resolve()) if shard == "HOST" else shard
    response = submit(client, keys, with_weight_map(package, target))
    assert_refused(response, code, reason, runtime)
    assert "weight_map" in response.json()["error"]["message"]


def onnx_with(package: Path, edit) -> bytes:  # type: ignore[no-untyped-def]
    with zipfile.ZipFile(package) as zf:
        model = onnx.load_from_string(zf.read("model.onnx"))
    edit(model)
    return rebuild_zip(package, drop=("model.onnx",), add=[("model.onnx", model.SerializeToString())])


def external_initializer(location: str):  # type: ignore[no-untyped-def]
    def edit(model: onnx.ModelProto) -> None:
        weight = helper.make_tensor("stolen", TensorProto.FLOAT, [4], [0.0] * 4)
        weight.ClearField("float_data")
        weight.data_location = TensorProto.EXTERNAL
        weight.external_data.add(key="location", value=location)
        model.graph.initializer.append(weight)

    return edit


@pytest.mark.parametrize(
    ("location", "code", "reason"),
    [
        ("/etc/passwd", "unsafe_package", "'/etc/passwd', which is absolute"),
        ("../../../etc/passwd", "unsafe_package", "climbs out of the package"),
        ("missing.data", "invalid_package", "not in the package"),
    ],
)
def test_onnx_external_data_outside_the_package_is_refused_in_the_request(
    client: TestClient,
    keys: Keys,
    runtime: Runtime,
    tfidf_packages: dict[str, Path],
    location: str,
    code: str,
    reason: str,
) -> None:
    response = submit(client, keys, onnx_with(tfidf_packages["sst2"], external_initializer(location)))
    assert_refused(response, code, reason, runtime)


def test_onnx_custom_operator_domains_are_refused_in_the_request(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    def edit(model: onnx.ModelProto) -> None:
        model.opset_import.append(helper.make_opsetid("com.example.custom", 1))

    response = submit(client, keys, onnx_with(tfidf_packages["sst2"], edit))
    assert_refused(response, "invalid_package", "custom domain 'com.example.custom'", runtime)


def test_an_absurd_declared_tensor_shape_is_refused_in_the_request(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}).encode()
    weights = len(header).to_bytes(8, "little") + header
    response = submit(client, keys, rebuild_zip(tfidf_packages["sst2"], add=[("extra.safetensors", weights)]))
    assert_refused(response, "invalid_package", "over the limit", runtime)


def test_the_unpacked_size_bound_is_the_deployments(
    client: TestClient, keys: Keys, runtime: Runtime, tfidf_packages: dict[str, Path]
) -> None:
    package = tfidf_packages["sst2"]
    with zipfile.ZipFile(package) as zf:
        unpacked = sum(info.file_size for info in zf.infolist())
    runtime.settings.package_max_unpacked_bytes = unpacked - 1
    response = submit(client, keys, package)
    assert_refused(response, "unsafe_package", f"uncompresses to over {unpacked - 1} bytes", runtime)
    runtime.settings.package_max_unpacked_bytes = unpacked
    assert submit(client, keys, package).status_code == 202
