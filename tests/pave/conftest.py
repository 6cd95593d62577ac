"""Tiny BERT bases built in the test (never downloaded) for the PAVE engine's unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.ml.spec_space import SpecSpace, SpecSpaceConfig, load_space
from tests.fixtures.tiny_bases import make_tiny_bert as tiny_bert

WORDS = [
    "good",
    "great",
    "fine",
    "bad",
    "awful",
    "poor",
    "movie",
    "film",
    "food",
    "service",
    "phone",
    "battery",
    "screen",
    "price",
    "love",
    "hate",
    "boring",
    "fun",
    "happy",
    "sad",
    "cheap",
    "slow",
    "fast",
    "weather",
    "music",
    "play",
    "book",
    "city",
    "news",
    "sport",
    "game",
    "team",
    "win",
    "lose",
    "market",
    "stock",
    "money",
    "spam",
    "free",
    "call",
    "text",
    "now",
    "prize",
]


def make_tiny_bert(folder: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random 2-layer BERT knowing ``WORDS`` and three label names."""
    return tiny_bert(
        folder, [*WORDS, "positive", "negative", "neutral"], hidden=hidden, layers=layers, seed=seed
    )


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_config(tiny_base: Path) -> SpecSpaceConfig:
    return SpecSpaceConfig(base=str(tiny_base), rank=4, alpha=4.0)


@pytest.fixture(scope="session")
def tiny_space(tiny_config: SpecSpaceConfig) -> SpecSpace:
    return load_space(tiny_config)


TEXTS = [
    "good great film",
    "love this movie fun",
    "great food fine service",
    "happy win fun",
    "awful boring film",
    "bad poor service slow",
    "hate this phone battery",
    "sad lose boring",
]
LABELS = [1, 1, 1, 1, 0, 0, 0, 0]
NAMES = ["negative", "positive"]
