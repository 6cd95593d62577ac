"""Shared fixtures of the service tests (tests/api, tests/e2e): real datasets and real packages.

Only fixtures live here (nothing autouse), so the ML tests are not affected.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The shared real datasets (PAVEDOCK_DATASETS_DIR or ../shared/datasets)."""
    for candidate in (
        os.environ.get("PAVEDOCK_DATASETS_DIR"),
        Path(__file__).resolve().parents[2] / "shared" / "datasets",
    ):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    pytest.skip("no datasets folder (set PAVEDOCK_DATASETS_DIR)")


@pytest.fixture(scope="session")
def package_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where real learnware packages built by the tests are kept for the session."""
    return tmp_path_factory.mktemp("packages")


@pytest.fixture(scope="session")
def tfidf_packages(datasets_dir: Path, package_dir: Path) -> dict[str, Path]:
    """Real TF-IDF + logistic regression ONNX learnwares for three datasets (seconds to train)."""
    from app.ml.builders import train_tfidf_onnx_learnware
    from app.ml.data import load_task

    out = {}
    for name in ("sst2", "trec", "sms_spam"):
        task = load_task(datasets_dir, name, "train", limit=1500, seed=0)
        out[name] = train_tfidf_onnx_learnware(task, package_dir / f"{name}-tfidf.zip")
    return out
