"""Merging full fine-tunes of a base, packaged as transformers sequence classifiers (``hf-seqcls``).

Each learnware is ``<prefix>.*`` (the base's encoder, every tensor possibly moved by fine-tuning)
plus its own ``classifier.*`` head. The encoders are merged by the streaming driver against the
registered base (one tensor of each model at a time, whatever T is). The heads cannot be merged
(each speaks of its own classes), so the merged model's head is their union: one output row per
distinct label name, the rows of the learnwares that share a name averaged. A learnware whose
encoder is not the base's architecture (a tensor missing, a shape that differs) is refused.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers
from torch import Tensor
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

from app.ml.bases import resolve_base
from app.ml.errors import InvalidInput, InvalidPackage
from app.ml.merging.driver import MergeStats, stream_merge
from app.ml.merging.sources import SafetensorsSink, SafetensorsSource, TensorSource
from app.ml.progress import Progress

HEAD = ("classifier.weight", "classifier.bias")
WEIGHTS = "model.safetensors"


class PrefixedSource:
    """The base-named view of a classifier's encoder: ``name`` reads ``prefix + name``."""

    def __init__(self, source: TensorSource, prefix: str) -> None:
        self._source = source
        self._prefix = prefix

    def keys(self) -> list[str]:
        names = self._source.keys()
        return [k.removeprefix(self._prefix) for k in names if k.startswith(self._prefix)]

    def get(self, name: str) -> Tensor:
        return self._source.get(self._prefix + name)


class WeightsOnly:
    """The floating-point tensors of a source: integer buffers a base checkpoint may hold
    (``position_ids``) are not weights, and transformers does not save them with a fine-tune."""

    def __init__(self, source: TensorSource) -> None:
        self._source = source
        names = source.keys()
        self._names = [n for n in names if source.get(n).is_floating_point()]

    def keys(self) -> list[str]:
        return list(self._names)

    def get(self, name: str) -> Tensor:
        return self._source.get(name)


class _HeadedSink:
    """Writes the merged encoder under ``prefix`` and, on close, the union head after it."""

    def __init__(self, sink: SafetensorsSink, prefix: str, head: dict[str, Tensor]) -> None:
        self._sink = sink
        self._prefix = prefix
        self._head = head

    def write(self, name: str, tensor: Tensor) -> None:
        self._sink.write(self._prefix + name, tensor)

    def close(self) -> None:
        for name, tensor in self._head.items():
            self._sink.write(name, tensor)
        self._sink.close()


@dataclass(frozen=True)
class FullLearnware:
    """A checked ``hf-seqcls`` model directory: its config, encoder prefix and label names."""

    path: Path
    config: dict[str, object]
    prefix: str
    label_names: list[str]


def read_full_learnware(path: Path, label_names: Sequence[str]) -> FullLearnware:
    """Check a sequence-classification directory's config and weights file; no code is run."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidPackage(f"cannot read {path.name}/config.json: {exc}") from exc
    model_type = config.get("model_type") if isinstance(config, dict) else None
    class_name = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(str(model_type))
    if class_name is None:
        raise InvalidPackage(f"model type {model_type!r} has no transformers sequence classifier")
    prefix = getattr(transformers, class_name).base_model_prefix
    if not (path / WEIGHTS).is_file():
        raise InvalidPackage(f"{path.name} has no {WEIGHTS}")
    return FullLearnware(path, config, f"{prefix}.", list(label_names))


def union_head(
    learnwares: Sequence[FullLearnware], sources: Sequence[TensorSource]
) -> tuple[list[str], dict[str, Tensor]]:
    """Label names in first-seen order and the head whose row c averages every input's row c."""
    names = list(dict.fromkeys(n for lw in learnwares for n in lw.label_names))
    rows: dict[str, list[tuple[Tensor, Tensor]]] = {n: [] for n in names}
    width: int | None = None
    for lw, source in zip(learnwares, sources, strict=True):
        present = set(source.keys())
        missing = [k for k in HEAD if k not in present]
        if missing:
            raise InvalidPackage(f"{lw.path.name} has no {missing[0]}: not a sequence classifier")
        weight, bias = source.get(HEAD[0]).to(torch.float32), source.get(HEAD[1]).to(torch.float32)
        if weight.dim() != 2 or weight.shape[0] != len(lw.label_names) or bias.shape != (weight.shape[0],):
            raise InvalidPackage(
                f"{lw.path.name}: head {tuple(weight.shape)} does not give its {len(lw.label_names)} classes"
            )
        if width is not None and weight.shape[1] != width:
            raise InvalidInput(f"heads of width {width} and {weight.shape[1]} cannot share one model")
        width = int(weight.shape[1])
        for index, name in enumerate(lw.label_names):
            rows[name].append((weight[index], bias[index]))
    head = {
        HEAD[0]: torch.stack([torch.stack([w for w, _ in rows[n]]).mean(0) for n in names]),
        HEAD[1]: torch.stack([torch.stack([b for _, b in rows[n]]).mean(0) for n in names]),
    }
    return names, head


def merge_full_learnwares(
    model_dirs: Sequence[Path],
    label_names: Sequence[Sequence[str]],
    base: str,
    method: str,
    params: dict[str, object] | None,
    out_dir: Path,
    progress: Progress | None = None,
) -> tuple[list[str], MergeStats]:
    """Merge full fine-tunes of ``base`` into a sequence-classification directory at ``out_dir``.

    Returns the merged model's label names (the union) and the driver's statistics. Tokenizer
    files come from the first learnware (they are the base's: its encoder shares the vocabulary).
    """
    if len(model_dirs) < 2:
        raise InvalidInput(f"a merge needs at least two learnwares, got {len(model_dirs)}")
    learnwares = [read_full_learnware(Path(d), n) for d, n in zip(model_dirs, label_names, strict=True)]
    base_dir = resolve_base(base)
    base_config = json.loads((base_dir / "config.json").read_text(encoding="utf-8"))
    for lw in learnwares:
        if lw.config.get("model_type") != base_config.get("model_type"):
            raise InvalidInput(
                f"{lw.path.name} is a {lw.config.get('model_type')} model; base {base} is "
                f"{base_config.get('model_type')}: only fine-tunes of the same base can be merged"
            )
        for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
            if lw.config.get(key) != base_config.get(key):
                raise InvalidInput(
                    f"the learnwares are not full fine-tunes of {base}: {lw.path.name} has "
                    f"{key} {lw.config.get(key)}, the base {base_config.get(key)}"
                )
    files = [SafetensorsSource(lw.path / WEIGHTS) for lw in learnwares]
    names, head = union_head(learnwares, files)
    base_source = WeightsOnly(SafetensorsSource(base_dir / WEIGHTS))
    encoders = [PrefixedSource(f, lw.prefix) for f, lw in zip(files, learnwares, strict=True)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sink = _HeadedSink(SafetensorsSink(out_dir / WEIGHTS, {"format": "pt"}), learnwares[0].prefix, head)
    try:
        stats = stream_merge(base_source, encoders, method, params, sink, progress)
    except InvalidInput as exc:
        raise InvalidInput(f"the learnwares are not full fine-tunes of {base}: {exc}") from exc
    config = dict(learnwares[0].config)
    config.update(
        num_labels=len(names),
        id2label={str(i): n for i, n in enumerate(names)},
        label2id={n: i for i, n in enumerate(names)},
        problem_type="single_label_classification",
    )
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    for file in learnwares[0].path.iterdir():
        if file.is_file() and file.name not in (WEIGHTS, "config.json") and file.suffix != ".safetensors":
            shutil.copyfile(file, out_dir / file.name)
    return names, stats


def classifier_accuracy(
    model_dir: Path,
    model_names: Sequence[str],
    texts: Sequence[str],
    labels: np.ndarray,
    names: Sequence[str],
) -> float | None:
    """Accuracy on (texts, labels into ``names``), predicting among ``names`` only; None when a
    name is not one of the model's classes."""
    from app.ml.encoders import token_batches

    columns = [list(model_names).index(n) for n in names if n in model_names]
    if len(columns) != len(names) or not texts:
        return None
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        model_dir, trust_remote_code=False, use_safetensors=True, local_files_only=True
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        model_dir, trust_remote_code=False, local_files_only=True
    )
    predicted = np.empty(len(texts), dtype=np.int64)
    with torch.no_grad():
        for batch in token_batches(
            tokenizer, list(texts), batch_size=32, max_tokens=128, device=torch.device("cpu")
        ):
            logits = model(**batch.inputs).logits[:, columns]
            predicted[batch.indices] = logits.argmax(dim=-1).numpy()
    return float((predicted == np.asarray(labels)).mean())


@dataclass(frozen=True)
class FullMergeResult:
    label_names: list[str]
    seconds: float
    stats: MergeStats
    heldout_accuracy: float | None
    """The merged model's accuracy on the eval shots, among their classes."""
    first_input_accuracy: float | None
    """The first input's, used as it is (None when it lacks one of the classes)."""


def merge_full_with_eval(
    model_dirs: Sequence[Path],
    label_names: Sequence[Sequence[str]],
    base: str,
    method: str,
    params: dict[str, object] | None,
    out_dir: Path,
    *,
    eval_texts: Sequence[str] = (),
    eval_labels: Sequence[int] = (),
    eval_names: Sequence[str] = (),
    progress: Progress | None = None,
) -> FullMergeResult:
    """Merge, then measure the merged model and the first input on the eval shots (if any)."""
    started = time.perf_counter()
    names, stats = merge_full_learnwares(model_dirs, label_names, base, method, params, out_dir, progress)
    seconds = time.perf_counter() - started
    labels = np.asarray(eval_labels, dtype=np.int64)
    return FullMergeResult(
        label_names=names,
        seconds=seconds,
        stats=stats,
        heldout_accuracy=classifier_accuracy(out_dir, names, eval_texts, labels, eval_names),
        first_input_accuracy=classifier_accuracy(
            Path(model_dirs[0]), list(label_names[0]), eval_texts, labels, eval_names
        ),
    )
