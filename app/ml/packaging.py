"""Turn what a developer has into a learnware package, and check it as the dock will.

``pavedock package`` is built on :func:`make_package`. Five sources are understood:

- a transformers sequence-classification directory (``config.json`` + safetensors weights +
  tokenizer files): ``hf-seqcls``, label names from ``id2label`` unless given;
- a PEFT LoRA adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``) over
  a registered base: ``peft-lora``, the base from ``--base`` or the adapter's config;
- a scikit-learn text pipeline saved with joblib or pickle: it is unpickled *here*, on the
  developer's machine (a pickle runs code, so only the developer's own file belongs here),
  exported to ONNX with skl2onnx and checked against the pipeline's own predictions; the
  package holds the ONNX file only, and the dock never loads a pickle;
- an ONNX file taking one string tensor: ``onnx``;
- a folder holding ``linear.safetensors`` (a d × d map after a registered base's pooling, as a
  UTD transfer saves it): ``pooled-linear``, the base and label names from ``--base`` and
  ``--label-names`` or the folder's ``transfer.json``.

The package is then checked with the dock's own code: :func:`extract_package` (safety,
manifest, layout), the runner of its format, and :func:`run_on_inputs` (the validation stage).
Errors are :class:`PackagingError`, whose message says what to change.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import numpy as np
from pydantic import ValidationError

from app.ml.errors import DockError, InvalidInput, InvalidPackage, UnknownBase, UnsafePackage
from app.ml.model_card import CardFields, onnx_card, read_card
from app.ml.packages import (
    FORBIDDEN_SUFFIXES,
    Manifest,
    PackageLimits,
    build_package,
    extract_package,
    inputs_jsonl,
)
from app.ml.pooled_linear import LINEAR_DIR, LINEAR_WEIGHTS
from app.ml.progress import Progress
from app.ml.validation import SPEC_FIT_INPUTS, VALIDATION_INPUTS, InputsRun, require_inputs, run_on_inputs

SourceFormat = Literal["hf-seqcls", "peft-lora", "sklearn", "onnx", "pooled-linear"]
SOURCE_FORMATS: tuple[SourceFormat, ...] = ("hf-seqcls", "peft-lora", "sklearn", "onnx", "pooled-linear")
INPUTS_NAME = "inputs.jsonl"
# Lower-casing runs in onnxruntime's StringNormalizer under this locale; "C.UTF-8" ships with
# glibc, where skl2onnx's default (en_US.UTF-8) is often not installed. The benchmarks' builders
# export with it too.
ONNX_LOCALE = "C.UTF-8"
PICKLE_SUFFIXES = (".joblib", ".pkl", ".pickle")
# The files of a transformers directory the dock needs; anything else (checkpoints, optimiser
# state, training arguments, model cards) stays out of the package.
HF_MODEL_FILES = re.compile(
    r"^(config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json"
    r"|tokenizer(_config)?\.json|special_tokens_map\.json|added_tokens\.json|vocab\.(txt|json)"
    r"|merges\.txt|spiece\.model|sentencepiece\.bpe\.model|generation_config\.json)$"
)
_DEFAULT_LABEL = re.compile(r"^LABEL_\d+$")
# Share of declared inputs on which the ONNX export must agree with the pipeline.
MIN_EXPORT_AGREEMENT = 0.99
# A dock's default upload limit (``Settings.max_upload_bytes``; a test keeps them equal): a
# bigger package is refused with 413 unless that dock raised its PAVEDOCK_MAX_UPLOAD_BYTES.
DOCK_MAX_UPLOAD_BYTES = 256 * 1024 * 1024


class PackagingError(DockError):
    """A source that cannot become a package; ``fix`` says what to change."""

    def __init__(self, message: str, fix: str = ""):
        super().__init__(message if not fix else f"{message}\n  fix: {fix}")
        self.problem = message
        self.fix = fix


@dataclass
class PackageRequest:
    """What ``pavedock package`` was given; None means "take it from the model"."""

    source: Path
    out: Path
    inputs: Path | None
    license: str | None
    format: SourceFormat | None = None
    name: str | None = None
    label_names: list[str] | None = None
    description: str = ""
    tags: list[str] = field(default_factory=list)
    base: str | None = None
    max_upload_bytes: int = DOCK_MAX_UPLOAD_BYTES
    """The upload limit of the dock it is meant for."""


@dataclass
class PackageResult:
    path: Path
    manifest: Manifest
    n_inputs: int
    run: InputsRun
    notes: list[str]
    """What was taken from the model, skipped or checked, one line each."""


def detect_format(source: Path) -> SourceFormat:
    """The source's format from what it holds."""
    if source.is_dir():
        if (source / "adapter_config.json").is_file():
            return "peft-lora"
        if (source / "config.json").is_file():
            return "hf-seqcls"
        if (source / LINEAR_WEIGHTS).is_file():
            return "pooled-linear"
        raise PackagingError(
            f"{source} holds neither adapter_config.json (a PEFT adapter), config.json "
            f"(a transformers model) nor {LINEAR_WEIGHTS} (a linear map after a base's pooling)",
            "point at the folder written by save_pretrained(), or give an .onnx or .joblib file",
        )
    suffix = source.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix in PICKLE_SUFFIXES:
        return "sklearn"
    raise PackagingError(
        f"{source.name}: cannot tell the format from the name",
        "give a transformers or PEFT folder, an .onnx file or a scikit-learn .joblib/.pkl file (or --format)",
    )


def read_inputs_file(path: Path, limits: PackageLimits | None = None) -> list[str]:
    """Declared inputs from a JSONL file (``{"text": ...}`` per line) or a text file (one per line)."""
    limits = limits or PackageLimits()
    if not path.is_file():
        raise PackagingError(f"--inputs {path} does not exist", "give --inputs a .jsonl or .txt file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise PackagingError(f"--inputs {path.name} is not UTF-8 ({exc})", "save it as UTF-8") from exc
    jsonl = path.suffix.lower() in (".jsonl", ".json", ".ndjson")
    texts: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        text: Any = line
        if jsonl:
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise PackagingError(
                    f"--inputs {path.name} line {number} is not JSON ({exc})",
                    'write one {"text": "..."} object per line, or use a .txt file with one text per line',
                ) from exc
            text = row.get("text") if isinstance(row, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise PackagingError(
                    f'--inputs {path.name} line {number} has no non-empty "text" string',
                    'write one {"text": "..."} object per line',
                )
        if len(text) > limits.max_input_chars:
            raise PackagingError(
                f"--inputs {path.name} line {number} has {len(text)} characters",
                f"keep each input under {limits.max_input_chars} characters",
            )
        texts.append(text)
    if not texts:
        raise PackagingError(f"--inputs {path.name} holds no inputs", "add typical inputs of your model")
    if len(texts) > limits.max_inputs:
        raise PackagingError(
            f"--inputs {path.name} holds {len(texts)} inputs",
            f"keep at most {limits.max_inputs} (256 are plenty)",
        )
    return texts


def _json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PackagingError(f"cannot read {path}: {exc}", f"{path.name} must be a JSON object") from exc
    if not isinstance(data, dict):
        raise PackagingError(f"{path} is not a JSON object", f"{path.name} must be a JSON object")
    return data


def _reconcile_labels(
    given: list[str] | None, found: list[str] | None, where: str, count: int | None
) -> list[str]:
    """The label names: the flag's if given (checked against the model), else the model's own."""
    if given is not None:
        if count is not None and len(given) != count:
            raise PackagingError(
                f"--label-names names {len(given)} classes, the model has {count} ({where})",
                f"give {count} comma-separated names, in the order of the model's outputs",
            )
        return given
    if found is None:
        raise PackagingError(
            f"the model does not name its classes ({where})",
            "give --label-names, e.g. --label-names negative,positive (in the order of the model's outputs)",
        )
    return found


# --- the four sources ---------------------------------------------------------------------------


def _hf_source(
    req: PackageRequest, notes: list[str]
) -> tuple[dict[str, Path | bytes], list[str], dict[str, Any]]:
    folder = req.source
    config = _json_file(folder / "config.json")
    files: dict[str, Path | bytes] = {}
    skipped: list[str] = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and HF_MODEL_FILES.match(path.name):
            files[f"model/{path.name}"] = path
        else:
            skipped.append(path.name + ("/" if path.is_dir() else ""))
    if not any(n.endswith(".safetensors") for n in files):
        pickled = [n for n in skipped if PurePosixPath(n).suffix in (".bin", ".pt", ".pth", ".ckpt")]
        raise PackagingError(
            f"{folder} has no model.safetensors"
            + (f" (only {', '.join(pickled)}, a pickle)" if pickled else ""),
            "save the weights as safetensors: model.save_pretrained(folder, safe_serialization=True); "
            "the dock never loads pickled weights",
        )
    if skipped:
        notes.append(f"left out (not needed to run the model): {', '.join(skipped)}")
    id2label = config.get("id2label")
    found: list[str] | None = None
    count = config.get("num_labels")
    if isinstance(id2label, dict) and id2label:
        ordered = [str(id2label[k]) for k in sorted(id2label, key=lambda k: int(k))]
        count = len(ordered)
        if not all(_DEFAULT_LABEL.match(n) for n in ordered):
            found = ordered
    names = _reconcile_labels(
        req.label_names,
        found,
        "config.json's id2label is " + ("missing" if not id2label else "LABEL_0, LABEL_1, …"),
        count if isinstance(count, int) else None,
    )
    if req.label_names is None:
        notes.append(f"label names from config.json's id2label: {', '.join(names)}")
    extra: dict[str, Any] = {}
    if req.base:
        extra["base_model"] = req.base
    return files, names, extra


def _registered_bases() -> list[str]:
    from app.ml.bases import registered_bases  # only for adapters

    return registered_bases()


def _peft_source(
    req: PackageRequest, notes: list[str]
) -> tuple[dict[str, Path | bytes], list[str], dict[str, Any]]:
    folder = req.source
    config = _json_file(folder / "adapter_config.json")
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        pickled = (folder / "adapter_model.bin").is_file()
        raise PackagingError(
            f"{folder} has no adapter_model.safetensors"
            + (" (only adapter_model.bin, a pickle)" if pickled else ""),
            "save the adapter with model.save_pretrained(folder) (peft writes safetensors by default)",
        )
    known = _registered_bases()
    base = req.base
    if base is None:
        declared = str(config.get("base_model_name_or_path") or "")
        # A hub name or a local path ending in a registered alias names that base.
        base = next((b for b in known if declared == b or declared.rstrip("/").endswith("/" + b)), None)
        if base is None:
            raise PackagingError(
                f"adapter_config.json names base {declared!r}, not a registered base",
                f"give --base, one of: {', '.join(known)}",
            )
        notes.append(f"base from adapter_config.json: {base}")
    elif base not in known:
        raise PackagingError(f"--base {base!r} is not a registered base", f"use one of: {', '.join(known)}")
    if req.label_names is None:
        raise PackagingError(
            "a LoRA adapter does not name its classes: the dock reads it through the label-name head, "
            "which embeds the names themselves",
            "give --label-names, the class names the adapter was trained with, in its order",
        )
    # Name the base by alias, not by a path on this machine.
    config["base_model_name_or_path"] = base
    files: dict[str, Path | bytes] = {
        "adapter/adapter_config.json": json.dumps(config, indent=2, sort_keys=True).encode(),
        "adapter/adapter_model.safetensors": weights,
    }
    return files, list(req.label_names), {"base_model": base}


def onnx_class_names(model: Any) -> list[str] | None:
    """The class names an ONNX classifier declares as strings (None for integer class ids)."""
    from app.ml.runners.onnx_model import class_labels

    labels = class_labels(model)
    if labels is None or not all(isinstance(x, str) for x in labels):
        return None
    return [str(x) for x in labels]


def _onnx_source(
    req: PackageRequest, notes: list[str]
) -> tuple[dict[str, Path | bytes], list[str], dict[str, Any]]:
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(req.source), load_external_data=False)
    except (DecodeError, OSError, ValueError) as exc:
        raise PackagingError(f"{req.source.name} is not an ONNX model ({exc})", "export it again") from exc
    found = onnx_class_names(model)
    names = _reconcile_labels(req.label_names, found, "its classifier has integer class ids", None)
    if found is not None and req.label_names is None:
        notes.append(f"label names from the ONNX classifier: {', '.join(names)}")
    if found is not None and set(found) != set(names):
        raise PackagingError(
            f"--label-names {names} are not the model's classes {found}",
            "give the model's own class names (any order), or leave --label-names out",
        )
    return {"model.onnx": req.source}, names, {}


def _vectorizers(estimator: Any) -> list[Any]:
    """Every text vectoriser inside a (possibly nested) pipeline, for their export options."""
    from sklearn.feature_extraction.text import CountVectorizer

    found: list[Any] = []
    if isinstance(estimator, CountVectorizer):  # TfidfVectorizer is a CountVectorizer
        found.append(estimator)
    for attr in ("steps", "transformer_list"):
        for _, step in getattr(estimator, attr, None) or []:
            found.extend(_vectorizers(step))
    return found


def export_sklearn(pipeline: Any, label_names: list[str] | None) -> tuple[bytes, list[str], Any]:
    """A fitted scikit-learn text pipeline as ONNX bytes taking raw strings; its label names.

    Returns (onnx bytes, label names in the manifest, a function mapping the pipeline's
    ``predict`` output onto manifest indices).
    """
    import onnx
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import StringTensorType

    final = pipeline.steps[-1][1] if hasattr(pipeline, "steps") else pipeline
    classes = getattr(final, "classes_", None)
    if classes is None or not hasattr(pipeline, "predict"):
        raise PackagingError(
            "the file does not hold a fitted classifier (no classes_)",
            "save the fitted Pipeline (vectoriser + classifier) with joblib.dump(pipeline, 'model.joblib')",
        )
    values = list(classes)
    if all(isinstance(c, str) for c in values):
        found = [str(c) for c in values]
        names = _reconcile_labels(label_names, found, "", len(found))
        if set(names) != set(found):
            raise PackagingError(
                f"--label-names {names} are not the pipeline's classes {found}",
                "give the pipeline's own class names (any order), or leave --label-names out",
            )
        index = {n: i for i, n in enumerate(names)}

        def to_manifest(pred: np.ndarray) -> np.ndarray:
            return np.array([index[str(p)] for p in pred], dtype=np.int64)

    elif all(isinstance(c, int | np.integer) for c in values):
        if [int(c) for c in values] != list(range(len(values))):
            raise PackagingError(
                f"the pipeline's classes are {values}, not 0..{len(values) - 1}",
                "train with class ids 0..C-1 or with the class names themselves as labels",
            )
        names = _reconcile_labels(
            label_names, None, "its classes are the ids 0.." + str(len(values) - 1), len(values)
        )

        def to_manifest(pred: np.ndarray) -> np.ndarray:
            return np.asarray(pred, dtype=np.int64)

    else:
        raise PackagingError(
            f"the pipeline's classes {values[:5]} are neither names nor ids",
            "train with string or integer labels",
        )
    options: dict[int, dict[str, Any]] = {id(v): {"locale": ONNX_LOCALE} for v in _vectorizers(pipeline)}
    options[id(final)] = {"zipmap": False}
    try:
        model = convert_sklearn(
            pipeline, initial_types=[("text", StringTensorType([None, 1]))], options=options
        )
    except Exception as exc:  # skl2onnx raises many kinds; the message is what matters
        raise PackagingError(
            f"skl2onnx cannot export this pipeline: {type(exc).__name__}: {exc}",
            "the dock runs ONNX on raw strings: a Pipeline of a text vectoriser (TfidfVectorizer, "
            "CountVectorizer) and a classifier (LogisticRegression, LinearSVC, …) exports; or export it "
            "yourself and give the .onnx file",
        ) from exc
    assert isinstance(model, onnx.ModelProto)
    model.graph.name = "sklearn_pipeline"  # skl2onnx names graphs with a random uuid
    return model.SerializeToString(), names, to_manifest


def load_own_pipeline(path: Path) -> Any:
    """Unpickle the developer's own pipeline on their machine (never in the dock)."""
    import joblib

    try:
        return joblib.load(path)
    except Exception as exc:  # unpickling can fail in as many ways as there are classes
        raise PackagingError(
            f"cannot load {path.name}: {type(exc).__name__}: {exc}",
            "save it with joblib.dump(pipeline, path) in an environment with the same scikit-learn",
        ) from exc


# --- the whole way ------------------------------------------------------------------------------


def _linear_source(
    req: PackageRequest, notes: list[str]
) -> tuple[dict[str, Path | bytes], list[str], dict[str, Any]]:
    """A folder holding ``linear.safetensors``; a UTD transfer's folder (``TransferResult.save``)
    also names its base and labels in ``transfer.json``, taken when not given."""
    folder = req.source
    meta_path = folder / "transfer.json"
    meta = _json_file(meta_path) if meta_path.is_file() else {}
    known = _registered_bases()
    base = req.base
    if base is None:
        declared = str(meta.get("target_base") or "")
        if declared not in known:
            raise PackagingError(
                "a linear map does not say which base's embeddings it maps"
                + (f" (transfer.json names {declared!r}, not a registered base)" if declared else ""),
                f"give --base, one of: {', '.join(known)}",
            )
        base = declared
        notes.append(f"base from transfer.json: {base}")
    elif base not in known:
        raise PackagingError(f"--base {base!r} is not a registered base", f"use one of: {', '.join(known)}")
    names = req.label_names
    if names is None:
        declared_names = meta.get("label_names")
        if not isinstance(declared_names, list) or not declared_names:
            raise PackagingError(
                "a linear map does not name its classes: the dock reads it through the label-name head",
                "give --label-names, the class names in the order of the outputs",
            )
        names = [str(n) for n in declared_names]
        notes.append(f"label names from transfer.json: {', '.join(names)}")
    return {f"{LINEAR_DIR}/{LINEAR_WEIGHTS}": folder / LINEAR_WEIGHTS}, list(names), {"base_model": base}


def make_package(req: PackageRequest, progress: Progress | None = None) -> PackageResult:
    """Build the package ``req`` describes, then check it exactly as the dock does."""
    source = req.source
    if not source.exists():
        raise PackagingError(f"{source} does not exist", "give the model's folder or file")
    fmt = req.format or detect_format(source)
    notes: list[str] = []
    card = _card_of(source, fmt)
    given = req.license is not None and bool(req.license.strip())
    license = req.license if given else card.license
    if license is None:
        raise PackagingError(
            "no licence" + (f" (none in {card.where})" if card.where else ""),
            "give --license with an SPDX id, e.g. --license Apache-2.0 or --license MIT"
            + (" (or put license: in the model card's front matter)" if source.is_dir() else ""),
        )
    if not given:
        notes.append(f"licence from {card.where}: {license}")
    description = req.description or card.description
    if description and not req.description:
        notes.append(f"description from {card.where}: {_shorten(description)}")
    tags = req.tags or card.tags
    if tags and not req.tags:
        notes.append(f"tags from {card.where}: {', '.join(tags)}")
    if req.inputs is None:
        raise PackagingError(
            "no declared inputs: the dock runs the model on them to validate it and fit its spec",
            'give --inputs with a .jsonl of {"text": ...} or a .txt of one text per line '
            "(a few hundred typical inputs, e.g. from your training set)",
        )
    inputs = read_inputs_file(req.inputs)
    to_manifest: Any = None
    pipeline: Any = None
    try:
        if fmt == "hf-seqcls":
            files, names, extra = _hf_source(req, notes)
        elif fmt == "peft-lora":
            files, names, extra = _peft_source(req, notes)
        elif fmt == "onnx":
            files, names, extra = _onnx_source(req, notes)
        elif fmt == "pooled-linear":
            files, names, extra = _linear_source(req, notes)
        else:
            pipeline = load_own_pipeline(source)
            blob, names, to_manifest = export_sklearn(pipeline, req.label_names)
            files, extra = {"model.onnx": blob}, {}
            notes.append(
                f"exported {type(pipeline).__name__} to ONNX with skl2onnx; the package holds no pickle"
            )
        model_format = "onnx" if fmt == "sklearn" else fmt
        for name in files:
            if PurePosixPath(name).suffix.lower() in FORBIDDEN_SUFFIXES:
                raise PackagingError(f"{name} is a file the dock refuses", "leave it out")
        try:
            manifest = Manifest.model_validate(
                {
                    "name": req.name or source.stem,
                    "description": description,
                    "tags": tags,
                    "label_names": names,
                    "model_format": model_format,
                    "license": license,
                    "inputs": INPUTS_NAME,
                    **extra,
                }
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'manifest'}: {e['msg']}" for e in exc.errors()
            )
            raise PackagingError(f"the manifest would be invalid: {problems}", _manifest_fix(exc)) from exc
        out = build_package(req.out, manifest, {**files, INPUTS_NAME: inputs_jsonl(inputs)})
        run = check_package(out, progress=progress)
    except PackagingError:
        raise
    except (InvalidPackage, UnsafePackage, InvalidInput, UnknownBase) as exc:
        req.out.unlink(missing_ok=True)
        raise PackagingError(
            f"the dock would refuse this package: {exc}", _fix_for(str(exc), fmt, len(inputs))
        ) from exc
    size = out.stat().st_size
    if size > req.max_upload_bytes:
        notes.append(
            f"warning: the package is {size / 2**20:.0f} MiB, over a dock's default upload limit of "
            f"{req.max_upload_bytes / 2**20:.0f} MiB: a dock refuses it (413) unless its "
            "PAVEDOCK_MAX_UPLOAD_BYTES is raised"
        )
    try:
        notes.extend(_slice_notes(run, manifest.label_names, len(inputs)))
    except PackagingError:
        req.out.unlink(missing_ok=True)
        raise
    if to_manifest is not None:
        agreement = float(np.mean(to_manifest(pipeline.predict(inputs[: len(run.labels)])) == run.labels))
        if agreement < MIN_EXPORT_AGREEMENT:
            req.out.unlink(missing_ok=True)
            raise PackagingError(
                f"the ONNX export agrees with your pipeline on only {agreement:.1%} of the declared inputs",
                "onnxruntime tokenises with re2 (ASCII \\w): use token_pattern=r'[a-zA-Z0-9_]{2,}' in the "
                "vectoriser, or export the pipeline yourself and check it",
            )
        notes.append(f"the ONNX export agrees with your pipeline on {agreement:.1%} of the declared inputs")
    return PackageResult(out, manifest, len(inputs), run, notes)


def _card_of(source: Path, fmt: SourceFormat) -> CardFields:
    """The manifest fields the model states itself: its model card, or an ONNX doc_string."""
    if source.is_dir():
        return read_card(source)
    if fmt == "onnx":
        import onnx

        try:  # an unreadable file is reported, with its reason, when its format is read
            doc = onnx.load(str(source), load_external_data=False).doc_string
        except Exception:  # protobuf and onnx raise many kinds here
            return CardFields()
        return onnx_card(doc) if doc.strip() else CardFields()
    return CardFields()


def _shorten(text: str, width: int = 72) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def check_package(zip_path: Path, progress: Progress | None = None) -> InputsRun:
    """The dock's checks on a package zip: extraction, manifest, layout, runner, inputs.

    The model runs on the inputs a dock's validation runs it on: the first VALIDATION_INPUTS.
    """
    from app.ml.runners import load_runner

    with tempfile.TemporaryDirectory(prefix="pavedock-package-") as tmp:
        package = extract_package(zip_path, Path(tmp) / "package", PackageLimits())
        require_inputs(package)
        runner = load_runner(package)
        texts = package.inputs[:VALIDATION_INPUTS]
        return run_on_inputs(runner, package.manifest.label_names, texts, progress=progress)


def _slice_notes(run: InputsRun, label_names: list[str], n_inputs: int) -> list[str]:
    """What the dock will use of the declared inputs, where it matters; a spec it cannot fit.

    The dock fits the spec to the model's answers on the first SPEC_FIT_INPUTS inputs and fails
    the learnware when those are all one class, even though validation saw more.
    """
    notes: list[str] = []
    if n_inputs > VALIDATION_INPUTS:
        notes.append(
            f"the dock runs the model on the first {VALIDATION_INPUTS} of your {n_inputs} inputs "
            "(as checked here); it keeps the others in the package"
        )
    early = sorted(set(run.labels[:SPEC_FIT_INPUTS].tolist()))
    missing = [label_names[c] for c in sorted(set(run.labels.tolist()) - set(early))]
    if len(early) < 2:
        raise PackagingError(
            f"the dock fits the spec on the first {SPEC_FIT_INPUTS} inputs, where the model predicts "
            f"{label_names[early[0]]} only: its spec stage would fail the learnware",
            "shuffle the inputs so that inputs of every class come early (--inputs)",
        )
    if missing:
        notes.append(
            f"warning: the spec is fitted on the first {SPEC_FIT_INPUTS} inputs, where the model "
            f"never predicts {', '.join(missing)}: users' tasks on those classes will hardly find it; "
            "shuffle the inputs so that every class comes early"
        )
    return notes


def _manifest_fix(exc: ValidationError) -> str:
    fields = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
    hints = {
        "name": "--name (1 to 128 characters)",
        "label_names": "--label-names with two or more distinct names",
        "tags": "--tags (at most 64)",
        "description": "--description (at most 10,000 characters)",
        "license": "--license",
        "base_model": "--base",
    }
    return (
        "change " + ", ".join(hints.get(f, f) for f in sorted(fields)) if fields else "see docs/packages.md"
    )


def _fix_for(message: str, fmt: SourceFormat, n_inputs: int) -> str:
    if "predicts a single class" in message:
        if n_inputs > VALIDATION_INPUTS:
            return (
                f"the dock runs the model on the first {VALIDATION_INPUTS} of your {n_inputs} inputs: "
                "shuffle them so that inputs of every class come early (--inputs)"
            )
        return "declare inputs of every class the model predicts (--inputs)"
    if "locale" in message:
        return (
            'export with the option {"locale": "C.UTF-8"} for each vectoriser (skl2onnx defaults to '
            "en_US.UTF-8, which most machines, the dock's workers too, do not have)"
        )
    if "output classes" in message:
        return "give as many --label-names as the model has outputs"
    if fmt == "peft-lora":
        return "the adapter must be a LoRA of the registered base (--base) with no modules_to_save"
    if fmt == "hf-seqcls":
        return "use a built-in transformers architecture saved with save_pretrained(safe_serialization=True)"
    if fmt == "pooled-linear":
        return f"{LINEAR_WEIGHTS} must hold one float tensor 'weight', d × d for the base's width d (--base)"
    return "see docs/packages.md for what each format needs"


def parse_list(value: str | None) -> list[str] | None:
    """A comma-separated flag as a list (None when not given)."""
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


__all__ = [
    "SOURCE_FORMATS",
    "PackageRequest",
    "PackageResult",
    "PackagingError",
    "check_package",
    "detect_format",
    "export_sklearn",
    "make_package",
    "read_inputs_file",
]
