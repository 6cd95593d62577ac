"""What a package's files name and declare, checked without running the model.

The zip checks see archive names; loaders also open files that JSON inside the package names:
a safetensors index's ``weight_map`` shards, tokenizer files named in ``tokenizer_config.json``,
ONNX external data locations. Each such name must be a plain relative path to a regular file
the package brought, or the package is refused with the reason; an absolute path, a ``..``
escape or a link out of the package never reaches a loader. The same pass reads every
safetensors header (shapes and byte ranges, nothing loaded), the transformers config's model
type and class count, and an ONNX graph's operator domains, so these faults are a 4xx in the
request instead of a failed job after the 202.

Runners call the same resolvers on what they open, so a folder assembled by hand (not
extracted from a zip) is held to the same rule.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.ml.adapters import read_lora_config
from app.ml.errors import InvalidPackage, UnsafePackage
from app.ml.pooled_linear import LINEAR_DIR, LINEAR_WEIGHTS, check_linear_file
from app.ml.safetensors_header import SafetensorsHeader, read_safetensors_header

if TYPE_CHECKING:
    import onnx

_DRIVE = re.compile(r"^[A-Za-z]:")
REMOTE_CODE_KEYS = frozenset({"auto_map", "trust_remote_code", "auto_mapping"})


def unsafe_path_reason(name: str) -> str | None:
    """Why an archive path could escape the package folder or is malformed; None if it is fine."""
    if not name or "\x00" in name:
        return "is empty or holds a NUL byte"
    if "\\" in name:
        return "holds a backslash"
    if name.startswith("/"):
        return "is absolute"
    if _DRIVE.match(name):
        return "starts with a drive letter"
    parts = name.rstrip("/").split("/")
    if any(p == ".." for p in parts):
        return "climbs out of the package with '..'"
    if any(p in ("", ".") for p in parts):
        return "has an empty or '.' component"
    return None


def is_peft_class_hint(key: str, value: Any) -> bool:
    """peft's ``auto_mapping`` naming a transformers class: a hint the dock never follows.

    peft writes it for adapters of a bare ``AutoModel`` base; the dock loads the registered
    base itself, so only a hint pointing into transformers is let through.
    """
    if (
        key != "auto_mapping"
        or not isinstance(value, dict)
        or set(value) - {"base_model_class", "parent_library"}
    ):
        return False
    library, cls = str(value.get("parent_library", "")), str(value.get("base_model_class", ""))
    return library.startswith("transformers.models.") and cls.isidentifier()


# Operator sets onnxruntime implements itself; any other domain would need a custom-op library.
ALLOWED_ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})
SAFETENSORS_INDEX = "model.safetensors.index.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# Files that make transformers apply a PEFT adapter (and the base it names) to a model folder.
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def resolve_inside(root: Path, base: Path, name: object, what: str) -> Path:
    """The regular file ``name`` (relative to the folder ``base``) if it lies inside ``root``.

    ``what`` says who names it (``"model/model.safetensors.index.json weight_map"``); the
    InvalidPackage or UnsafePackage error says why the name is refused.
    """
    if not isinstance(name, str):
        raise InvalidPackage(f"{what} names {name!r}, which is not a file name")
    reason = unsafe_path_reason(name)
    if reason:
        raise UnsafePackage(f"{what} names {name!r}, which {reason}: only files inside the package are read")
    path = base / name
    real_root = root.resolve()
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a loop of links
        raise InvalidPackage(f"{what} names {name!r}, which is not in the package") from None
    if not real.is_relative_to(real_root):
        raise UnsafePackage(f"{what} names {name!r}, a link that leads out of the package")
    if not real.is_file():
        raise InvalidPackage(f"{what} names {name!r}, which is not a file")
    return real


def check_tree(root: Path) -> None:
    """Refuse links and special files anywhere under ``root`` (extraction makes neither; a
    folder built by hand may hold a link to a host file)."""
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise UnsafePackage(
                    f"{_relative(path, root)} is a symbolic link: only files the package brings are read"
                )
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise UnsafePackage(f"{_relative(path, root)} is not a regular file")


def _read_json(path: Path, root: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidPackage(f"{_relative(path, root)} is not valid JSON: {exc}") from exc


def check_safetensors_files(root: Path) -> dict[Path, SafetensorsHeader]:
    """Every ``.safetensors`` file's header, checked (declared shapes against their bytes)."""
    return {
        path: read_safetensors_header(path, _relative(path, root))
        for path in sorted(root.rglob("*.safetensors"))
        if path.is_file()
    }


# --- hf-seqcls -----------------------------------------------------------------------------------


def check_model_type(config: dict[str, object]) -> str:
    """The model type, if transformers itself implements it with a sequence-classification head."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    for key in REMOTE_CODE_KEYS:
        if config.get(key) and not is_peft_class_hint(key, config[key]):
            raise UnsafePackage(f"config.json sets {key!r}: the dock never runs code shipped with a model")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        raise InvalidPackage(f"model type {model_type!r} is not built into transformers")
    if model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        raise InvalidPackage(f"transformers has no sequence-classification model for type {model_type!r}")
    if config.get("problem_type") not in (None, "single_label_classification"):
        raise InvalidPackage(f"problem_type {config['problem_type']!r} is not single-label classification")
    return model_type


def _declared_classes(config: dict[str, Any]) -> int:
    """How many classes a transformers config declares (transformers' default is 2)."""
    id2label = config.get("id2label")
    if id2label is not None:
        if not isinstance(id2label, dict) or not id2label:
            raise InvalidPackage("model/config.json: id2label must map class ids to names")
        return len(id2label)
    num_labels = config.get("num_labels", 2)
    if type(num_labels) is not int or num_labels < 1:
        raise InvalidPackage(f"model/config.json: num_labels must be a positive integer, got {num_labels!r}")
    return num_labels


def config_errors() -> tuple[type[Exception], ...]:
    """What transformers raises for a config it cannot use (a value of the wrong type, for one)."""
    from huggingface_hub.errors import StrictDataclassError

    return (OSError, ValueError, KeyError, TypeError, AttributeError, StrictDataclassError)


def _parse_config(folder: Path, where: str) -> None:
    """The config as transformers reads it (config.json alone, no weights, no code)."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(folder, trust_remote_code=False, local_files_only=True)
    except config_errors() as exc:
        raise InvalidPackage(
            f"transformers cannot read {where}/config.json: {type(exc).__name__}: {exc}"
        ) from exc


def check_transformers_dir(root: Path, folder: Path, label_count: int | None = None) -> None:
    """A transformers folder: a built-in model type with ``label_count`` classes, no adapter, and
    every file its index and tokenizer config name inside the package."""
    where = _relative(folder, root)
    present = [name for name in ADAPTER_FILES if (folder / name).exists()]
    if present:
        raise InvalidPackage(
            f"{where}/{present[0]}: transformers would apply this adapter (and load the base it names); "
            "package an adapter as peft-lora"
        )
    config = _read_json(resolve_inside(root, folder, "config.json", f"a {where} folder"), root)
    if not isinstance(config, dict):
        raise InvalidPackage(f"{where}/config.json must be a JSON object")
    check_model_type(config)
    _parse_config(folder, where)
    classes = _declared_classes(config)
    if label_count is not None and classes != label_count:
        raise InvalidPackage(f"model has {classes} output classes, the manifest names {label_count}")
    index_path = folder / SAFETENSORS_INDEX
    if index_path.exists():
        _check_weight_map(root, folder, _read_json(index_path, root), f"{where}/{SAFETENSORS_INDEX}")
    tokenizer_config = folder / TOKENIZER_CONFIG
    if tokenizer_config.exists():
        _check_tokenizer_config(
            root, folder, _read_json(tokenizer_config, root), f"{where}/{TOKENIZER_CONFIG}"
        )


def _check_weight_map(root: Path, folder: Path, index: Any, what: str) -> None:
    """Each shard the index names is a safetensors file of the package holding the tensors mapped to it."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidPackage(f"{what} has no weight_map of tensor names to files")
    shards: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str):
            raise InvalidPackage(f"{what} weight_map maps {tensor!r} to {shard!r}, which is not a file name")
        shards.setdefault(shard, []).append(str(tensor))
    for shard, tensors in shards.items():
        path = resolve_inside(root, folder, shard, f"{what} weight_map")
        if path.suffix != ".safetensors":
            raise UnsafePackage(
                f"{what} weight_map names {shard!r}: weights load from safetensors files only"
            )
        header = read_safetensors_header(path, _relative(path, root.resolve()))
        absent = sorted(set(tensors) - set(header.tensors))
        if absent:
            raise InvalidPackage(f"{what} maps {absent[0]!r} to {shard!r}, which does not hold it")


def _check_tokenizer_config(root: Path, folder: Path, config: Any, what: str) -> None:
    """File names a tokenizer config may carry (``vocab_file``, ``tokenizer_file``, ...,
    ``fast_tokenizer_files``): each inside the package, or absent."""
    if not isinstance(config, dict):
        raise InvalidPackage(f"{what} must be a JSON object")
    for key, value in config.items():
        if key.endswith("_file") and value is not None:
            resolve_inside(root, folder, value, f"{what} {key}")
    fast = config.get("fast_tokenizer_files")
    if fast is not None:
        if not isinstance(fast, list):
            raise InvalidPackage(f"{what} fast_tokenizer_files must be a list of file names")
        for name in fast:
            resolve_inside(root, folder, name, f"{what} fast_tokenizer_files")


# --- onnx ----------------------------------------------------------------------------------------


def onnx_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """A graph and every subgraph its nodes hold (If, Loop, Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from onnx_graphs(attr.g)
            for sub in attr.graphs:
                yield from onnx_graphs(sub)


def onnx_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in a graph: initializers, sparse ones, and tensor attributes."""
    for g in onnx_graphs(graph):
        yield from g.initializer
        for sparse in g.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors


def onnx_external_data(
    model: onnx.ModelProto, root: Path, folder: Path
) -> Iterator[tuple[onnx.TensorProto, Path, int, int | None]]:
    """Each tensor stored outside ``model.onnx``: its file (inside the package) and byte range."""
    import onnx

    for tensor in onnx_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        what = f"model.onnx tensor {tensor.name!r} external data"
        path = resolve_inside(root, folder, info.get("location"), what)
        try:
            offset = int(info.get("offset", 0))
            length = int(info["length"]) if "length" in info else None
        except ValueError:
            raise InvalidPackage(f"{what} has a bad offset or length: {info}") from None
        size = path.stat().st_size
        if offset < 0 or (length is not None and length < 0) or offset + (length or 0) > size:
            raise InvalidPackage(
                f"{what} reads bytes {offset}..{offset + (length or 0)} of {info['location']!r}, "
                f"which holds {size}"
            )
        yield tensor, path, offset, length


def check_onnx_model(model: onnx.ModelProto, root: Path, folder: Path) -> None:
    """Refuse external data outside the package and operators of custom domains (they need a
    custom-op library, native code the dock never loads)."""
    for _ in onnx_external_data(model, root, folder):
        pass
    local = {f.domain for f in model.functions}
    for opset in model.opset_import:
        if opset.domain not in ALLOWED_ONNX_DOMAINS and opset.domain not in local:
            raise InvalidPackage(f"model.onnx imports an operator set of custom domain {opset.domain!r}")
    nodes = [n for g in onnx_graphs(model.graph) for n in g.node] + [
        n for f in model.functions for n in f.node
    ]
    for node in nodes:
        if node.domain not in ALLOWED_ONNX_DOMAINS and node.domain not in local:
            raise InvalidPackage(
                f"model.onnx uses operator {node.op_type!r} of custom domain {node.domain!r}"
            )


def load_onnx(path: Path) -> onnx.ModelProto:
    """``model.onnx`` parsed (external data not read); InvalidPackage if it is not ONNX."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        return onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError, ValueError) as exc:
        raise InvalidPackage(f"model.onnx is not an ONNX model: {exc}") from exc


# --- the whole package ---------------------------------------------------------------------------


def check_package_content(root: Path, model_format: str, n_labels: int) -> None:
    """Every content check that needs no model run, on an extracted package at ``root``."""
    check_tree(root)
    check_safetensors_files(root)
    if model_format == "hf-seqcls":
        check_transformers_dir(root, root / "model", n_labels)
    elif model_format == "peft-lora":
        # The LoRA settings as the runner reads them (PEFT type, extra modules, targets); its
        # base_model_name_or_path is never followed: the base is the manifest's registered alias.
        read_lora_config(root / "adapter" / "adapter_config.json")
    elif model_format == "onnx":
        check_onnx_model(load_onnx(root / "model.onnx"), root, root)
    elif model_format == "pooled-linear":
        # One square float matrix; its width against the base's is the runner's check (it loads the base).
        check_linear_file(root / LINEAR_DIR / LINEAR_WEIGHTS)
