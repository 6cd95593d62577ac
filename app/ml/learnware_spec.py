"""A learnware's model spec: run the learnware on its declared inputs, fit B to what it says."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from app.ml.errors import InvalidPackage
from app.ml.packages import LearnwarePackage, PackageLimits, extract_package
from app.ml.pave import PaveSpec, fit_pave_spec
from app.ml.progress import Progress
from app.ml.runners import Runner, load_runner
from app.ml.spec_space import FitRecipe, SpecSpace
from app.ml.validation import SPEC_FIT_INPUTS

MAX_SPEC_INPUTS = SPEC_FIT_INPUTS


def fit_learnware_spec(
    space: SpecSpace,
    runner: Runner,
    inputs: list[str],
    *,
    max_inputs: int = MAX_SPEC_INPUTS,
    recipe: FitRecipe | None = None,
    progress: Progress | None = None,
) -> PaveSpec:
    """Fit the model vector to the learnware's own predictions h(x) on ``inputs``.

    Probabilities are used where the runner gives them (soft targets), labels otherwise.
    """
    if not inputs:
        raise InvalidPackage("the package declares no inputs to run the model on")
    texts = inputs[:max_inputs]
    predictions = runner.predict(texts)
    targets: np.ndarray = predictions.probs if predictions.probs is not None else predictions.labels
    spec = fit_pave_spec(
        space, texts, targets, runner.label_names, kind="model", recipe=recipe, progress=progress
    )
    spec.meta["predicted_class_counts"] = np.bincount(
        predictions.labels, minlength=len(runner.label_names)
    ).tolist()
    return spec


def spec_for_package(
    space: SpecSpace, package: Path | LearnwarePackage, *, progress: Progress | None = None
) -> PaveSpec:
    """Check a package zip (or use an extracted one), run it, and fit its model spec."""
    if isinstance(package, LearnwarePackage):
        return fit_learnware_spec(space, load_runner(package), package.inputs, progress=progress)
    with tempfile.TemporaryDirectory(prefix="pavedock-spec-") as tmp:
        extracted = extract_package(package, Path(tmp) / "package", PackageLimits())
        return fit_learnware_spec(space, load_runner(extracted), extracted.inputs, progress=progress)
