"""ONNX models run with onnxruntime: one string tensor in, a label and probabilities out.

This is what skl2onnx produces for a text pipeline (TF-IDF + LogisticRegression): input
``tensor(string)`` of shape [N, 1] or [N]; outputs a label tensor (int64 class ids or the
label names as strings) and probabilities, either a [N, C] float tensor or, with ZipMap, a
sequence of {class: probability} maps. Probability columns follow the class labels the
classifier node declares, mapped onto the manifest's label order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from app.ml.errors import InvalidPackage
from app.ml.package_content import check_onnx_model, check_tree, load_onnx, onnx_external_data, onnx_graphs
from app.ml.packages import LearnwarePackage
from app.ml.runners.base import Runner

CLASSIFIER_OPS = ("ZipMap", "LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier")
ORT_ERRORS: tuple[type[Exception], ...] = tuple(
    getattr(ort_state, name)
    for name in (
        "Fail",
        "InvalidArgument",
        "NoSuchFile",
        "NoModel",
        "EngineError",
        "RuntimeException",
        "InvalidProtobuf",
        "ModelLoaded",
        "NotImplemented",
        "InvalidGraph",
        "EPFail",
    )
    if hasattr(ort_state, name)
)
LABEL_TYPES = ("tensor(int64)", "tensor(string)")
PROB_TYPES = ("tensor(float)", "tensor(double)")


def class_labels(model: onnx.ModelProto) -> list[int | str] | None:
    """The class labels a classifier node declares, in the order of its probability columns."""
    for g in onnx_graphs(model.graph):
        for node in g.node:
            if node.domain == "ai.onnx.ml" and node.op_type in CLASSIFIER_OPS:
                for attr in node.attribute:
                    if attr.name == "classlabels_int64s" and attr.ints:
                        return [int(v) for v in attr.ints]
                    if attr.name == "classlabels_strings" and attr.strings:
                        return [v.decode("utf-8") for v in attr.strings]
    return None


def _inline_external_data(model: onnx.ModelProto, root: Path, folder: Path) -> None:
    """Read tensors stored beside ``model.onnx`` into the model itself, from the files inside the
    package their checked locations name (onnxruntime would resolve the names on its own)."""
    for tensor, path, offset, length in onnx_external_data(model, root, folder):
        with path.open("rb") as fh:
            fh.seek(offset)
            tensor.raw_data = fh.read() if length is None else fh.read(length)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


class OnnxRunner(Runner):
    """An ONNX classifier on raw strings, through onnxruntime's CPU provider."""

    format = "onnx"

    def __init__(self, package: LearnwarePackage, threads: int | None = None):
        super().__init__(package.manifest.label_names)
        check_tree(package.root)
        model = load_onnx(package.model_path)
        check_onnx_model(model, package.root, package.model_path.parent)
        _inline_external_data(model, package.root, package.model_path.parent)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except ORT_ERRORS as exc:
            raise InvalidPackage(f"onnxruntime cannot load model.onnx: {exc}") from exc
        inputs = self.session.get_inputs()
        if len(inputs) != 1 or inputs[0].type != "tensor(string)":
            got = [(i.name, i.type) for i in inputs]
            raise InvalidPackage(f"model.onnx must take one string tensor input, got {got}")
        self.input_name = inputs[0].name
        self.input_rank = len(inputs[0].shape or [None, None])
        outputs = self.session.get_outputs()
        self.label_output = next((o.name for o in outputs if o.type in LABEL_TYPES), None)
        prob = next(
            (
                o
                for o in outputs
                if (o.type in PROB_TYPES and len(o.shape or ()) == 2) or o.type.startswith("seq(map(")
            ),
            None,
        )
        self.prob_output = prob.name if prob is not None else None
        self.zipmap = prob is not None and prob.type.startswith("seq(map(")
        if self.label_output is None and self.prob_output is None:
            got = [(o.name, o.type) for o in outputs]
            raise InvalidPackage(f"model.onnx has neither a label nor a probability output: {got}")
        declared = class_labels(model)
        self.columns = [self._index(c) for c in declared] if declared is not None else None

    def _index(self, label: Any) -> int:
        """The manifest index of a class as the model names it (an id, or a label name)."""
        if isinstance(label, bytes):
            label = label.decode("utf-8")
        if isinstance(label, str):
            if label in self.label_names:
                return self.label_names.index(label)
            raise InvalidPackage(f"model.onnx predicts class {label!r}, not among {self.label_names}")
        index = int(label)
        if not 0 <= index < len(self.label_names):
            raise InvalidPackage(f"model.onnx predicts class {index}, outside 0..{len(self.label_names) - 1}")
        return index

    def _probs(self, raw: Any, n: int) -> np.ndarray:
        probs = np.zeros((n, len(self.label_names)), dtype=np.float32)
        if self.zipmap:
            for row, mapping in enumerate(raw):
                for key, value in mapping.items():
                    probs[row, self._index(key)] = value
            return probs
        arr = np.asarray(raw, dtype=np.float32)
        columns = self.columns if self.columns is not None else list(range(arr.shape[1]))
        if arr.shape[1] != len(columns):
            raise InvalidPackage(
                f"model.onnx gives {arr.shape[1]} probability columns for {len(columns)} classes"
            )
        probs[:, columns] = arr
        return probs

    def _predict(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
        names = [n for n in (self.label_output, self.prob_output) if n is not None]
        labels: list[np.ndarray] = []
        probs: list[np.ndarray] = []
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            feed = np.asarray(chunk, dtype=object).reshape((-1, 1) if self.input_rank == 2 else (-1,))
            try:
                result = dict(zip(names, self.session.run(names, {self.input_name: feed}), strict=True))
            except ORT_ERRORS as exc:
                raise InvalidPackage(f"model.onnx failed on the inputs: {exc}") from exc
            batch_probs = self._probs(result[self.prob_output], len(chunk)) if self.prob_output else None
            if self.label_output is not None:
                raw = np.asarray(result[self.label_output]).reshape(-1)
                labels.append(np.array([self._index(v) for v in raw], dtype=np.int64))
            else:
                assert batch_probs is not None
                labels.append(batch_probs.argmax(axis=1))
            if batch_probs is not None:
                probs.append(batch_probs)
        return np.concatenate(labels), (np.concatenate(probs) if probs else None)
