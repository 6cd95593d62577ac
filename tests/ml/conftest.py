"""Tiny models built in the test (never downloaded), a tiny text task, and the real data folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

from app.ml.bases import register_base
from app.ml.data import TextTask

TINY_BASE = "tiny-bert-ml-tests"
CLASSES = {
    "sports": ["game", "team", "win", "lose", "match", "goal", "coach", "season"],
    "food": ["pizza", "bread", "cheese", "soup", "salad", "dinner", "taste", "cook"],
    "music": ["song", "band", "guitar", "album", "concert", "sing", "piano", "drums"],
}
FILLER = ["the", "a", "was", "is", "really", "very", "today", "this", "that", "my", "great", "bad"]


def make_tiny_bert(folder: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random 2-layer BERT with a word-level WordPiece vocabulary, saved as safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    words = [*FILLER, *CLASSES, *(w for ws in CLASSES.values() for w in ws)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(folder)
    (folder / "vocab.txt").unlink()  # the saved tokenizer.json carries the vocabulary
    return folder


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


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    path = Path(
        os.environ.get("PAVEDOCK_DATASETS_DIR", Path(__file__).resolve().parents[3] / "shared/datasets")
    )
    if not (path / "sst2" / "train.jsonl").is_file():
        pytest.skip(f"real datasets not found at {path}")
    return path
