"""Tiny BERT bases built in the test (never downloaded) for the PAVE engine's unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

from app.ml.spec_space import SpecSpace, SpecSpaceConfig, load_space

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
    """A randomly initialised 2-layer BERT with a word-level vocabulary, saved as safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "positive", "negative", "neutral"]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    return folder


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
