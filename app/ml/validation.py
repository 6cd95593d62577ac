"""What the dock checks when it runs a learnware on its declared inputs, in one place.

The worker's ``validate`` stage and ``pavedock package`` (on the developer's machine) call the
same functions, so a package that passes locally passes in the dock, and the other way round.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from app.ml.errors import InvalidPackage
from app.ml.packages import LearnwarePackage
from app.ml.progress import Progress

if TYPE_CHECKING:  # the runners import torch; the API imports this module for require_inputs
    from app.ml.runners.base import Runner

PREDICT_BATCH = 64
# A dock's defaults (``Settings.validation_inputs`` and ``spec_fit_inputs``; a test keeps them
# equal): validation runs the model on the first VALIDATION_INPUTS declared inputs, the spec is
# fitted to its answers on the first SPEC_FIT_INPUTS. ``pavedock package`` checks the same slices.
VALIDATION_INPUTS = 512
SPEC_FIT_INPUTS = 256
NO_INPUTS = (
    "the manifest declares no inputs: the dock runs the model on them to validate it "
    "and to fit its spec (add a JSONL of {\"text\": ...} and name it in 'inputs')"
)


def require_inputs(package: LearnwarePackage) -> None:
    """A package without declared inputs cannot be validated or given a spec."""
    if not package.inputs:
        raise InvalidPackage(NO_INPUTS)


@dataclass(frozen=True)
class InputsRun:
    """The model's answers on its declared inputs, as the validation stage stores them."""

    labels: np.ndarray
    """(N,) int64 class ids into the manifest's label names."""
    probs: np.ndarray | None
    """(N, C) float32, or None when the model gives labels only."""
    seconds: float
    spread: str
    """Predicted classes and their counts, e.g. ``negative: 120, positive: 136``."""


def run_on_inputs(
    runner: Runner,
    label_names: Sequence[str],
    texts: Sequence[str],
    *,
    progress: Progress | None = None,
) -> InputsRun:
    """Run ``runner`` on ``texts``; refuse what the dock refuses.

    The runner must read the manifest's label names in the manifest's order, give finite
    probabilities, and predict at least two classes (a spec is fitted to those predictions).
    """
    if list(runner.label_names) != list(label_names):
        raise InvalidPackage(
            f"the model's label names {runner.label_names} differ from the manifest's {list(label_names)}"
        )
    texts = list(texts)
    labels: list[np.ndarray] = []
    probs: list[np.ndarray] = []
    started = time.perf_counter()
    for start in range(0, len(texts), PREDICT_BATCH):
        batch = runner.predict(texts[start : start + PREDICT_BATCH])
        labels.append(batch.labels)
        if batch.probs is not None:
            probs.append(batch.probs)
        if progress is not None:
            done = min(len(texts), start + PREDICT_BATCH)
            progress(done, len(texts), f"running the model on its inputs ({done}/{len(texts)})")
    seconds = time.perf_counter() - started
    all_labels = np.concatenate(labels)
    all_probs = np.concatenate(probs) if len(probs) == len(labels) else None
    spread = check_answers(all_labels, all_probs, label_names)
    return InputsRun(labels=all_labels, probs=all_probs, seconds=seconds, spread=spread)


def check_answers(labels: np.ndarray, probs: np.ndarray | None, label_names: Sequence[str]) -> str:
    """Refuse answers on the declared inputs that no spec can be fitted to: non-finite
    probabilities, or a single predicted class. Returns the spread of the predicted classes."""
    if probs is not None and not np.all(np.isfinite(probs)):
        raise InvalidPackage("the model returns non-finite probabilities on its declared inputs")
    counts = Counter(int(c) for c in labels)
    spread = ", ".join(f"{label_names[c]}: {n}" for c, n in sorted(counts.items()))
    if len(counts) < 2:
        raise InvalidPackage(
            f"the model predicts a single class ({spread}) on its {len(labels)} declared inputs: "
            "its spec needs inputs on which it predicts at least two classes"
        )
    return spread
