"""What every learnware runner returns, and the checks they share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from app.ml.encoders import check_texts
from app.ml.errors import InvalidInput, InvalidPackage
from app.ml.packages import ModelFormat


@dataclass(frozen=True)
class Predictions:
    """Class ids into the runner's ``label_names``, and probabilities where the model gives them."""

    labels: np.ndarray
    """(N,) int64."""
    probs: np.ndarray | None
    """(N, C) float32, rows summing to 1, columns in ``label_names`` order; None if the model has none."""


class Runner(ABC):
    """Runs a learnware on texts. No runner executes code shipped with a package."""

    format: ClassVar[ModelFormat]

    def __init__(self, label_names: Sequence[str]):
        self.label_names = list(label_names)

    def predict(self, texts: Sequence[str], batch_size: int = 32) -> Predictions:
        """Predict a class (and probabilities) for every text, in input order."""
        texts = check_texts(texts)
        if batch_size < 1:
            raise InvalidInput(f"batch_size must be at least 1, got {batch_size}")
        labels, probs = self._predict(texts, batch_size)
        # Outputs of the wrong shape are the model's doing (an ONNX graph can return anything):
        # the package's fault, said in words, not an internal error of the job.
        labels = np.asarray(labels, dtype=np.int64)
        if labels.shape != (len(texts),):
            raise InvalidPackage(
                f"the {self.format} model returned labels of shape {labels.shape} for {len(texts)} texts"
            )
        if probs is not None:
            probs = np.asarray(probs, dtype=np.float32)
            if probs.shape != (len(texts), len(self.label_names)):
                raise InvalidPackage(
                    f"the {self.format} model returned probabilities of shape {probs.shape} for "
                    f"{len(texts)} texts and {len(self.label_names)} classes"
                )
        return Predictions(labels=labels, probs=probs)

    @abstractmethod
    def _predict(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Labels (N,) and probabilities (N, C) or None, for checked texts."""
