"""Learnware packages: the manifest, the layouts, and every way an upload is refused."""

from __future__ import annotations

import io
import json
import pickle
import stat
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from app.ml.errors import InvalidPackage, UnsafePackage
from app.ml.packages import (
    MANIFEST_NAME,
    LearnwarePackage,
    Manifest,
    PackageLimits,
    build_package,
    extract_package,
    files_under,
    inputs_jsonl,
    read_manifest,
    read_package_inputs,
)

Member = tuple[str | zipfile.ZipInfo, bytes]

ONNX_MANIFEST = {
    "name": "tfidf-sst2",
    "description": "tf-idf + logistic regression",
    "tags": ["sentiment"],
    "task_type": "text-classification",
    "label_names": ["negative", "positive"],
    "model_format": "onnx",
    "license": "Apache-2.0",
}
LORA_MANIFEST = {**ONNX_MANIFEST, "model_format": "peft-lora", "base_model": "all-MiniLM-L6-v2"}
SEQCLS_MANIFEST = {**ONNX_MANIFEST, "model_format": "hf-seqcls"}
EMPTY_SAFETENSORS = struct.pack("<Q", 2) + b"{}"
LORA_CONFIG = json.dumps({"peft_type": "LORA", "r": 4, "target_modules": ["query", "value"]}).encode()
LORA_FILES = {
    "adapter/adapter_config.json": LORA_CONFIG,
    "adapter/adapter_model.safetensors": EMPTY_SAFETENSORS,
}
SEQCLS_FILES = {
    "model/config.json": json.dumps({"model_type": "bert"}).encode(),
    "model/model.safetensors": EMPTY_SAFETENSORS,
    "model/tokenizer.json": b"{}",
}


def yaml_of(data: dict[str, object]) -> bytes:
    return yaml.safe_dump(data).encode()


def write_zip(path: Path, members: list[Member], compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for info, data in members:
            zf.writestr(info, data)
    return path


def onnx_members(**extra: bytes) -> list[Member]:
    return [(MANIFEST_NAME, yaml_of(ONNX_MANIFEST)), ("model.onnx", b"\x08\x07"), *extra.items()]


def assert_refused(
    zip_path: Path,
    tmp_path: Path,
    error: type[Exception],
    match: str,
    limits: PackageLimits | None = None,
) -> None:
    """The error is raised with the reason, and nothing is left where the package would go."""
    dest = tmp_path / "out" / "pkg"
    with pytest.raises(error, match=match):
        extract_package(zip_path, dest, limits)
    assert not dest.exists()
    if dest.parent.exists():
        assert list(dest.parent.iterdir()) == []


def test_build_and_extract_round_trip(tmp_path: Path) -> None:
    manifest = Manifest.model_validate({**ONNX_MANIFEST, "inputs": "inputs.jsonl", "spec": "spec/pave"})
    texts = ["a fine film", "dull, and too long", "ünïcödé ✓"]
    zip_path = build_package(
        tmp_path / "pkg.zip",
        manifest,
        {
            "model.onnx": b"\x08\x07",
            "inputs.jsonl": inputs_jsonl(texts),
            "spec/pave.safetensors": EMPTY_SAFETENSORS,
            "spec/pave.json": b"{}",
        },
    )
    package = extract_package(zip_path, tmp_path / "pkg")
    assert isinstance(package, LearnwarePackage)
    assert package.manifest == manifest
    assert package.inputs == texts
    assert package.model_path == tmp_path / "pkg" / "model.onnx"
    assert package.spec_stem == tmp_path / "pkg" / "spec" / "pave"
    assert (package.model_path).read_bytes() == b"\x08\x07"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg", "pkg.zip"]


def test_build_is_deterministic_and_reads_folders(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    for name, data in SEQCLS_FILES.items():
        (folder / name.removeprefix("model/")).write_bytes(data)
    manifest = Manifest.model_validate(SEQCLS_MANIFEST)
    files = files_under(folder, "model")
    assert sorted(files) == sorted(SEQCLS_FILES)
    first = build_package(tmp_path / "a.zip", manifest, files).read_bytes()
    second = build_package(tmp_path / "b.zip", manifest, files).read_bytes()
    assert first == second
    package = extract_package(tmp_path / "a.zip", tmp_path / "pkg")
    assert package.inputs == []
    assert package.model_path == tmp_path / "pkg" / "model"


def test_lora_package_extracts(tmp_path: Path) -> None:
    zip_path = build_package(tmp_path / "l.zip", Manifest.model_validate(LORA_MANIFEST), LORA_FILES)
    package = extract_package(zip_path, tmp_path / "pkg")
    assert package.manifest.base_model == "all-MiniLM-L6-v2"
    assert (package.model_path / "adapter_config.json").is_file()


def test_extract_into_an_existing_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    package = extract_package(write_zip(tmp_path / "p.zip", onnx_members()), tmp_path / "pkg")
    assert package.model_path.is_file()


def test_refuses_a_non_empty_destination(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        extract_package(write_zip(tmp_path / "p.zip", onnx_members()), tmp_path / "pkg")
    assert (tmp_path / "pkg" / "keep.txt").read_text() == "mine"


def test_read_manifest_from_bytes_yaml_file_and_zip(tmp_path: Path) -> None:
    text = yaml_of(LORA_MANIFEST)
    (tmp_path / "learnware.yaml").write_bytes(text)
    zip_path = build_package(tmp_path / "l.zip", Manifest.model_validate(LORA_MANIFEST), LORA_FILES)
    expected = Manifest.model_validate(LORA_MANIFEST)
    assert read_manifest(text) == expected
    assert read_manifest(tmp_path / "learnware.yaml") == expected
    assert read_manifest(str(zip_path)) == expected


# --- archives the dock refuses -----------------------------------------------------------------


def symlink_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def fifo_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFIFO | 0o644) << 16
    return info


def test_refuses_what_is_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "p.zip"
    path.write_bytes(b"this is not a zip archive at all" * 10)
    assert_refused(path, tmp_path, InvalidPackage, "not a zip archive")


def test_refuses_total_size_over_the_limit(tmp_path: Path) -> None:
    zip_path = write_zip(tmp_path / "p.zip", onnx_members(**{"big.txt": b"x" * 5000}))
    limits = PackageLimits(max_total_bytes=4096)
    assert_refused(zip_path, tmp_path, UnsafePackage, "uncompresses to over 4096 bytes", limits)


def test_refuses_a_high_compression_ratio(tmp_path: Path) -> None:
    zip_path = write_zip(tmp_path / "p.zip", onnx_members(**{"zeros.txt": bytes(3 << 20)}))
    assert_refused(zip_path, tmp_path, UnsafePackage, r"'zeros.txt' compresses \d+:1")


def test_refuses_too_many_members(tmp_path: Path) -> None:
    extra = {f"notes/{i}.txt": b"n" for i in range(20)}
    zip_path = write_zip(tmp_path / "p.zip", onnx_members(**extra))
    assert_refused(zip_path, tmp_path, UnsafePackage, "22 members", PackageLimits(max_members=10))


def _lie_about_size(data: bytearray, name: bytes, size: int) -> None:
    """Rewrite a member's uncompressed size in both its local and central headers."""
    local = data.find(b"PK\x03\x04")
    while local != -1:
        name_len = struct.unpack_from("<H", data, local + 26)[0]
        if data[local + 30 : local + 30 + name_len] == name:
            struct.pack_into("<I", data, local + 22, size)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central != -1:
        name_len = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46 : central + 46 + name_len] == name:
            struct.pack_into("<I", data, central + 24, size)
        central = data.find(b"PK\x01\x02", central + 4)


def test_counts_bytes_instead_of_trusting_declared_sizes(tmp_path: Path) -> None:
    zip_path = write_zip(tmp_path / "p.zip", onnx_members(**{"data.txt": b"y" * 20_000}))
    data = bytearray(zip_path.read_bytes())
    _lie_about_size(data, b"data.txt", 100)
    zip_path.write_bytes(bytes(data))
    assert_refused(zip_path, tmp_path, InvalidPackage, "corrupt package|holds")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../evil.txt", "climbs out"),
        ("model/../../evil.txt", "climbs out"),
        ("/etc/evil.txt", "absolute"),
        ("C:/evil.txt", "drive letter"),
        ("model\\..\\evil.txt", "backslash"),
        ("a//b.txt", "empty or '.' component"),
    ],
)
def test_refuses_path_traversal(tmp_path: Path, name: str, reason: str) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [*onnx_members(), (name, b"x")])
    assert_refused(zip_path, tmp_path, UnsafePackage, reason)
    assert not (tmp_path / "evil.txt").exists()


def test_refuses_symlinks(tmp_path: Path) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [*onnx_members(), (symlink_info("link"), b"/etc/passwd")])
    assert_refused(zip_path, tmp_path, UnsafePackage, "'link' is a symbolic link")


def test_refuses_special_files(tmp_path: Path) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [*onnx_members(), (fifo_info("pipe"), b"")])
    assert_refused(zip_path, tmp_path, UnsafePackage, "'pipe' is not a regular file")


def test_refuses_duplicate_members(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="Duplicate name"):
        zip_path = write_zip(tmp_path / "p.zip", [*onnx_members(), ("model.onnx", b"\x08\x08")])
    assert_refused(zip_path, tmp_path, UnsafePackage, "'model.onnx' appears twice")


@pytest.mark.parametrize(
    "name",
    [
        "weights.pkl",
        "weights.pickle",
        "model/pytorch_model.bin",
        "ckpt.pt",
        "ckpt.pth",
        "last.ckpt",
        "clf.joblib",
        "arrays.npz",
        "modeling_custom.py",
        "cache.pyc",
        "lib.so",
        "lib.dll",
        "setup.sh",
    ],
)
def test_refuses_pickles_code_and_binaries_by_name(tmp_path: Path, name: str) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [*onnx_members(), (name, b"harmless?")])
    assert_refused(zip_path, tmp_path, UnsafePackage, f"'{name}'.*are refused")


class _Exploit:
    def __reduce__(self) -> tuple[Callable[..., object], tuple[str]]:
        return (print, ("pwned",))


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (pickle.dumps(_Exploit(), protocol=4), "a pickle"),
        (pickle.dumps({"a": 1}, protocol=2), "a pickle"),
        (b"cos\nsystem\n(S'echo pwned'\ntR.", "a pickle"),
        (b"\x7fELF\x02\x01\x01" + bytes(40), "ELF"),
        (b"MZ\x90\x00" + bytes(40), "Windows executable"),
        (b"#!/bin/sh\nrm -rf /\n", "script"),
        (b"PK\x03\x04" + bytes(40), "nested zip"),
    ],
)
def test_refuses_pickles_and_binaries_by_content(tmp_path: Path, content: bytes, what: str) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [*onnx_members(), ("notes.txt", content)])
    assert_refused(zip_path, tmp_path, UnsafePackage, f"'notes.txt' is .*{what}")


def test_safetensors_headers_are_not_mistaken_for_pickles(tmp_path: Path) -> None:
    # A 0x380-byte header starts "\x80\x03", like a protocol-3 pickle; 0x5a4d starts "MZ".
    for size in (0x380, 0x5A4D, 0x2123):
        tensors = struct.pack("<Q", size) + b"{" + b" " * (size - 2) + b"}"
        zip_path = write_zip(tmp_path / f"{size}.zip", [*onnx_members(), ("extra.safetensors", tensors)])
        assert extract_package(zip_path, tmp_path / f"ok-{size}").model_path.is_file()


@pytest.mark.parametrize("content", [pickle.dumps({"a": 1}, protocol=4), b"\x08", b"MZ\x90" + bytes(40)])
def test_refuses_fake_safetensors(tmp_path: Path, content: bytes) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [*onnx_members(), ("weights.safetensors", content)])
    assert_refused(zip_path, tmp_path, InvalidPackage, "'weights.safetensors' is not a safetensors file")


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def test_refuses_object_arrays_but_not_numbers(tmp_path: Path) -> None:
    objects = write_zip(
        tmp_path / "o.zip", [*onnx_members(), ("extra.npy", _npy(np.array([{}], dtype=object)))]
    )
    assert_refused(objects, tmp_path, UnsafePackage, "array of Python objects")
    numbers = write_zip(tmp_path / "n.zip", [*onnx_members(), ("extra.npy", _npy(np.arange(4.0)))])
    assert extract_package(numbers, tmp_path / "ok").model_path.is_file()


@pytest.mark.parametrize(
    ("name", "config", "key"),
    [
        ("model/config.json", {"model_type": "bert", "auto_map": {"AutoModel": "x.Y"}}, "auto_map"),
        ("model/config.json", {"model_type": "bert", "trust_remote_code": True}, "trust_remote_code"),
        ("model/tokenizer_config.json", {"auto_map": {"AutoTokenizer": ["t.T", None]}}, "auto_map"),
        (
            "model/config.json",
            {
                "model_type": "bert",
                "auto_mapping": {"base_model_class": "Evil", "parent_library": "evil_module"},
            },
            "auto_mapping",
        ),
    ],
)
def test_refuses_configs_that_load_remote_code(
    tmp_path: Path, name: str, config: dict[str, object], key: str
) -> None:
    files = {**SEQCLS_FILES, name: json.dumps(config).encode()}
    members: list[Member] = [(MANIFEST_NAME, yaml_of(SEQCLS_MANIFEST)), *files.items()]
    assert_refused(write_zip(tmp_path / "p.zip", members), tmp_path, UnsafePackage, f"sets '{key}'")


def test_accepts_peft_class_hint_into_transformers(tmp_path: Path) -> None:
    """peft writes auto_mapping for adapters of a bare AutoModel; the dock never follows it."""
    hint = {"base_model_class": "BertModel", "parent_library": "transformers.models.bert.modeling_bert"}
    config = {"model_type": "bert", "auto_mapping": hint}
    files = {**SEQCLS_FILES, "model/config.json": json.dumps(config).encode()}
    members: list[Member] = [(MANIFEST_NAME, yaml_of(SEQCLS_MANIFEST)), *files.items()]
    assert extract_package(write_zip(tmp_path / "p.zip", members), tmp_path / "ok").root.is_dir()


def test_refuses_a_config_that_is_not_json(tmp_path: Path) -> None:
    files = {**SEQCLS_FILES, "model/config.json": b"{not json"}
    members: list[Member] = [(MANIFEST_NAME, yaml_of(SEQCLS_MANIFEST)), *files.items()]
    assert_refused(write_zip(tmp_path / "p.zip", members), tmp_path, InvalidPackage, "not valid JSON")


# --- manifests ---------------------------------------------------------------------------------


def test_refuses_a_missing_manifest(tmp_path: Path) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [("model.onnx", b"\x08")])
    assert_refused(zip_path, tmp_path, InvalidPackage, "no learnware.yaml at the root")


def test_explains_a_manifest_inside_a_folder(tmp_path: Path) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [("pkg/learnware.yaml", yaml_of(ONNX_MANIFEST))])
    assert_refused(zip_path, tmp_path, InvalidPackage, "zip the folder's contents")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"name: [unclosed", "not valid YAML"),
        (b"- just\n- a list\n", "must be a mapping"),
        (yaml_of({k: v for k, v in ONNX_MANIFEST.items() if k != "name"}), "name: Field required"),
        (
            yaml_of({k: v for k, v in ONNX_MANIFEST.items() if k != "label_names"}),
            "label_names: Field required",
        ),
        (yaml_of({k: v for k, v in ONNX_MANIFEST.items() if k != "license"}), "license: Field required"),
        (yaml_of({**ONNX_MANIFEST, "model_format": "pickle"}), "model_format"),
        (yaml_of({**ONNX_MANIFEST, "task_type": "image-classification"}), "task_type"),
        (yaml_of({**ONNX_MANIFEST, "label_names": ["only"]}), "at least two label names"),
        (yaml_of({**ONNX_MANIFEST, "label_names": ["a", "b", "a"]}), r"duplicate label names: \['a'\]"),
        (yaml_of({**ONNX_MANIFEST, "label_names": ["a", " "]}), "non-empty"),
        (yaml_of({**ONNX_MANIFEST, "surprise": 1}), "surprise: Extra inputs are not permitted"),
        (yaml_of({**ONNX_MANIFEST, "inputs": "../inputs.jsonl"}), "climbs out"),
        (yaml_of({**ONNX_MANIFEST, "model_format": "peft-lora"}), "base_model is required"),
    ],
)
def test_refuses_bad_manifests(tmp_path: Path, text: bytes, match: str) -> None:
    zip_path = write_zip(tmp_path / "p.zip", [(MANIFEST_NAME, text), ("model.onnx", b"\x08")])
    assert_refused(zip_path, tmp_path, InvalidPackage, match)
    with pytest.raises(InvalidPackage, match=match):
        read_manifest(text)


def test_refuses_an_oversized_manifest(tmp_path: Path) -> None:
    text = yaml_of({**ONNX_MANIFEST, "description": "x" * 5000})
    zip_path = write_zip(tmp_path / "p.zip", [(MANIFEST_NAME, text), ("model.onnx", b"\x08")])
    limits = PackageLimits(max_manifest_bytes=1024)
    assert_refused(zip_path, tmp_path, InvalidPackage, "over 1024", limits)


def test_refuses_a_lora_adapter_of_an_unregistered_base(tmp_path: Path) -> None:
    members: list[Member] = [
        (MANIFEST_NAME, yaml_of({**LORA_MANIFEST, "base_model": "my-secret-base"})),
        *LORA_FILES.items(),
    ]
    zip_path = write_zip(tmp_path / "p.zip", members)
    assert_refused(zip_path, tmp_path, InvalidPackage, "'my-secret-base' is not a registered base")


# --- layouts and declared files ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "files", "missing"),
    [
        (LORA_MANIFEST, {"adapter/adapter_config.json": b"{}"}, "adapter/adapter_model.safetensors"),
        (LORA_MANIFEST, {"adapter/adapter_model.safetensors": b"\x08"}, "adapter/adapter_config.json"),
        (
            SEQCLS_MANIFEST,
            {k: v for k, v in SEQCLS_FILES.items() if "tokenizer" not in k},
            "model/tokenizer.json or",
        ),
        (
            SEQCLS_MANIFEST,
            {k: v for k, v in SEQCLS_FILES.items() if "safetensors" not in k},
            "model/model.safetensors",
        ),
        (SEQCLS_MANIFEST, {k: v for k, v in SEQCLS_FILES.items() if "config" not in k}, "model/config.json"),
        (ONNX_MANIFEST, {"model.bin.txt": b"x"}, "model.onnx"),
    ],
)
def test_refuses_missing_format_files(
    tmp_path: Path, manifest: dict[str, object], files: dict[str, bytes], missing: str
) -> None:
    members: list[Member] = [(MANIFEST_NAME, yaml_of(manifest)), *files.items()]
    assert_refused(write_zip(tmp_path / "p.zip", members), tmp_path, InvalidPackage, f"needs {missing}")
    with pytest.raises(InvalidPackage, match=missing):
        build_package(tmp_path / "b.zip", Manifest.model_validate(manifest), files)
    assert not (tmp_path / "b.zip").exists()


def test_refuses_declared_files_that_are_missing(tmp_path: Path) -> None:
    with_inputs = {**ONNX_MANIFEST, "inputs": "inputs.jsonl"}
    members: list[Member] = [(MANIFEST_NAME, yaml_of(with_inputs)), ("model.onnx", b"\x08")]
    assert_refused(
        write_zip(tmp_path / "i.zip", members), tmp_path, InvalidPackage, "'inputs.jsonl' is not in"
    )
    with_spec = {**ONNX_MANIFEST, "spec": "spec"}
    members = [
        (MANIFEST_NAME, yaml_of(with_spec)),
        ("model.onnx", b"\x08"),
        ("spec.safetensors", EMPTY_SAFETENSORS),
    ]
    assert_refused(write_zip(tmp_path / "s.zip", members), tmp_path, InvalidPackage, "lacks 'spec.json'")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b'{"text": "fine"}\nnot json\n', "line 2 is not JSON"),
        (b'{"text": "fine"}\n{"label": 1}\n', 'line 2 has no non-empty "text"'),
        (b'{"text": "   "}\n', 'line 1 has no non-empty "text"'),
        (b'["text"]\n', 'line 1 has no non-empty "text"'),
        (b"\n\n", "holds no inputs"),
        (b"\xff\xfe\x00", "not UTF-8"),
    ],
)
def test_refuses_bad_declared_inputs(tmp_path: Path, content: bytes, match: str) -> None:
    manifest = {**ONNX_MANIFEST, "inputs": "inputs.jsonl"}
    members: list[Member] = [
        (MANIFEST_NAME, yaml_of(manifest)),
        ("model.onnx", b"\x08"),
        ("inputs.jsonl", content),
    ]
    assert_refused(write_zip(tmp_path / "p.zip", members), tmp_path, InvalidPackage, match)


def test_refuses_too_many_declared_inputs(tmp_path: Path) -> None:
    manifest = {**ONNX_MANIFEST, "inputs": "inputs.jsonl"}
    content = inputs_jsonl(f"text {i}" for i in range(11))
    members: list[Member] = [
        (MANIFEST_NAME, yaml_of(manifest)),
        ("model.onnx", b"\x08"),
        ("inputs.jsonl", content),
    ]
    limits = PackageLimits(max_inputs=10)
    assert_refused(write_zip(tmp_path / "p.zip", members), tmp_path, InvalidPackage, "over 10 inputs", limits)


def test_build_refuses_unsafe_names(tmp_path: Path) -> None:
    manifest = Manifest.model_validate(ONNX_MANIFEST)
    with pytest.raises(UnsafePackage, match="climbs out"):
        build_package(tmp_path / "p.zip", manifest, {"model.onnx": b"\x08", "../x": b""})
    with pytest.raises(UnsafePackage, match=r"\.pkl files are refused"):
        build_package(tmp_path / "p.zip", manifest, {"model.onnx": b"\x08", "m.pkl": b""})
    with pytest.raises(InvalidPackage, match="written from the manifest"):
        build_package(tmp_path / "p.zip", manifest, {"model.onnx": b"\x08", MANIFEST_NAME: b""})
    assert list(tmp_path.iterdir()) == []


# --- content checked at extraction (in the request) --------------------------------------------


def safetensors_of(header: dict[str, object], data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def lora_members(weights: bytes) -> list[Member]:
    return [
        (MANIFEST_NAME, yaml_of(LORA_MANIFEST)),
        ("adapter/adapter_config.json", LORA_CONFIG),
        ("adapter/adapter_model.safetensors", weights),
    ]


@pytest.mark.parametrize(
    ("tensor", "data", "match"),
    [
        # 2**64 elements: the 64-bit count wraps to 0, which 0 bytes of data would "hold".
        ({"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]}, b"", "over the limit"),
        ({"dtype": "F32", "shape": [2**62, 4], "data_offsets": [0, 0]}, b"", "over the limit"),
        ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, bytes(8), "needs 12 bytes"),
        ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, bytes(4), "bad shape"),
        ({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}, bytes(4), "bad shape"),
        ({"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}, bytes(4), "unknown dtype 'Q7'"),
        (
            {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            bytes(4),
            "cover 8 bytes of data, the file holds 4",
        ),
        ({"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}, bytes(8), "starts at byte 4, not 0"),
    ],
)
def test_refuses_safetensors_headers_that_lie(
    tmp_path: Path, tensor: dict[str, object], data: bytes, match: str
) -> None:
    weights = safetensors_of({"base_model.model.x.lora_A.weight": tensor}, data)
    zip_path = write_zip(tmp_path / "p.zip", lora_members(weights))
    assert_refused(zip_path, tmp_path, InvalidPackage, match)


def test_accepts_honest_safetensors_headers(tmp_path: Path) -> None:
    weights = safetensors_of(
        {
            "__metadata__": {"format": "pt"},
            "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
            "empty": {"dtype": "F32", "shape": [0, 5], "data_offsets": [22, 22]},
        },
        bytes(22),
    )
    extract_package(write_zip(tmp_path / "p.zip", lora_members(weights)), tmp_path / "ok")


def test_refuses_overlapping_tensor_data(tmp_path: Path) -> None:
    weights = safetensors_of(
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
        },
        bytes(12),
    )
    assert_refused(write_zip(tmp_path / "p.zip", lora_members(weights)), tmp_path, InvalidPackage, "overlaps")


def test_refuses_a_package_much_larger_unpacked_than_uploaded(tmp_path: Path) -> None:
    """Members each under the per-member ratio, adding up to many times the upload."""
    rng = np.random.default_rng(0)
    # 8 KiB of noise repeated: deflate's 32 KiB window finds it, so it compresses ~50:1.
    block = rng.bytes(8 << 10) * 200
    extra = {f"notes/{i}.txt": block for i in range(4)}
    zip_path = write_zip(tmp_path / "p.zip", onnx_members(**extra))
    limits = PackageLimits(total_ratio_min_bytes=1 << 20, max_total_ratio=10)
    assert_refused(zip_path, tmp_path, UnsafePackage, "over the limit of 10:1 for the whole package", limits)


@pytest.mark.parametrize(
    ("shard", "error", "match"),
    [
        ("/usr/share/model.safetensors", UnsafePackage, "is absolute"),
        ("../../model.safetensors", UnsafePackage, "'..'"),
        ("C:/models/model.safetensors", UnsafePackage, "drive letter"),
        ("shard.safetensors", InvalidPackage, "not in the package"),
    ],
)
def test_refuses_a_weight_map_pointing_outside(
    tmp_path: Path, shard: str, error: type[Exception], match: str
) -> None:
    index = {"weight_map": {"bert.embeddings.word_embeddings.weight": shard}}
    files = {
        **{k: v for k, v in SEQCLS_FILES.items() if k != "model/model.safetensors"},
        "model/model.safetensors.index.json": json.dumps(index).encode(),
    }
    members: list[Member] = [(MANIFEST_NAME, yaml_of(SEQCLS_MANIFEST)), *files.items()]
    assert_refused(write_zip(tmp_path / "p.zip", members), tmp_path, error, match)


def test_refuses_a_config_of_another_class_count(tmp_path: Path) -> None:
    config = {"model_type": "bert", "id2label": {"0": "a", "1": "b", "2": "c"}}
    files = {**SEQCLS_FILES, "model/config.json": json.dumps(config).encode()}
    members: list[Member] = [(MANIFEST_NAME, yaml_of(SEQCLS_MANIFEST)), *files.items()]
    assert_refused(
        write_zip(tmp_path / "p.zip", members),
        tmp_path,
        InvalidPackage,
        "3 output classes, the manifest names 2",
    )


def test_refuses_an_onnx_file_that_is_not_onnx(tmp_path: Path) -> None:
    zip_path = write_zip(
        tmp_path / "p.zip", [(MANIFEST_NAME, yaml_of(ONNX_MANIFEST)), ("model.onnx", b"\x08\x07garbage")]
    )
    assert_refused(zip_path, tmp_path, InvalidPackage, "not an ONNX model")


def test_read_package_inputs_reads_the_inputs_member_alone(tmp_path: Path) -> None:
    """The spec stage needs only the texts: the model member is not unpacked (here it is corrupt)."""
    manifest = {**ONNX_MANIFEST, "inputs": "inputs.jsonl"}
    members: list[Member] = [
        (MANIFEST_NAME, yaml_of(manifest)),
        ("model.onnx", b"\x08\x07" * 50_000),
        ("inputs.jsonl", inputs_jsonl(["one", "two"])),
    ]
    zip_path = write_zip(tmp_path / "p.zip", members)
    data = bytearray(zip_path.read_bytes())
    start = data.find(b"model.onnx") + len(b"model.onnx")
    data[start + 10 : start + 20] = b"\xff" * 10  # the model's deflate stream no longer decodes
    zip_path.write_bytes(bytes(data))
    assert read_package_inputs(zip_path) == ["one", "two"]
    with pytest.raises(InvalidPackage, match="corrupt package"):
        extract_package(zip_path, tmp_path / "pkg")
    assert read_package_inputs(write_zip(tmp_path / "none.zip", onnx_members())) == []
    bomb = write_zip(tmp_path / "bomb.zip", [*members[:2], ("inputs.jsonl", bytes(3 << 20))])
    with pytest.raises(UnsafePackage, match="zip bomb"):
        read_package_inputs(bomb)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"peft_type": "PREFIX_TUNING"}, "only LORA is supported"),
        ({"modules_to_save": ["classifier"]}, "modules_to_save"),
        ({"target_modules": []}, "names no target_modules"),
    ],
)
def test_refuses_lora_settings_the_runner_would_refuse(
    tmp_path: Path, config: dict[str, object], match: str
) -> None:
    full = {**json.loads(LORA_CONFIG), **config}
    files = {**LORA_FILES, "adapter/adapter_config.json": json.dumps(full).encode()}
    members: list[Member] = [(MANIFEST_NAME, yaml_of(LORA_MANIFEST)), *files.items()]
    assert_refused(write_zip(tmp_path / "p.zip", members), tmp_path, InvalidPackage, match)
