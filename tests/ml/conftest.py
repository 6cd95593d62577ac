"""Tiny models built in the test (never downloaded) and a tiny text task (the real data folder is
tests/conftest.py's ``datasets_dir``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.ml.bases import register_base
from app.ml.data import TextTask
from tests.fixtures.tiny_bases import make_tiny_bert as tiny_bert

TINY_BASE = "tiny-bert-ml-tests"
CLASSES = {
    "sports": ["game", "team", "win", "lose", "match", "goal", "coach", "season"],
    "food": ["pizza", "bread", "cheese", "soup", "salad", "dinner", "taste", "cook"],
    "music": ["song", "band", "guitar", "album", "concert", "sing", "piano", "drums"],
}
FILLER = ["the", "a", "was", "is", "really", "very", "today", "this", "that", "my", "great", "bad"]


def make_tiny_bert(folder: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random 2-layer BERT knowing the topics' words."""
    words = [*FILLER, *CLASSES, *(w for ws in CLASSES.values() for w in ws)]
    return tiny_bert(folder, words, hidden=hidden, layers=layers, seed=seed)


def make_tiny_task(n_per_class: int = 24, seed: int = 0, split: str = "train") -> TextTask:
    """Three topics told apart by their words, with filler words mixed in."""
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    labels: list[int] = []
    for label, words in enumerate(CLASSES.values()):
        for _ in range(n_per_class):
            chosen = [*rng.choice(words, size=3), *rng.choice(FILLER, size=2)]
            rng.shuffle(chosen)
            texts.append(" ".join(str(w) for w in chosen))
            labels.append(label)
    order = rng.permutation(len(texts))
    return TextTask(
        name="tiny-topics",
        split=split,
        texts=[texts[i] for i in order],
        labels=np.asarray(labels, dtype=np.int64)[order],
        label_names=list(CLASSES),
    )


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_base(tiny_base_dir: Path) -> str:
    """The tiny BERT registered as a base alias, as a LoRA package names its base."""
    register_base(TINY_BASE, lambda: tiny_base_dir)
    return TINY_BASE


@pytest.fixture(scope="session")
def tiny_task() -> TextTask:
    return make_tiny_task()


@pytest.fixture(scope="session")
def tiny_test_task() -> TextTask:
    return make_tiny_task(n_per_class=10, seed=1, split="test")
