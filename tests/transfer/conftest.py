"""Tiny BERT and MPNet bases of different widths and depths, built here, never downloaded."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import (
    BertConfig,
    BertModel,
    BertTokenizer,
    DistilBertConfig,
    DistilBertModel,
    MPNetConfig,
    MPNetModel,
    MPNetTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

POSITIVE = ["great", "good", "fine", "fun", "loved", "love", "win"]
NEGATIVE = ["bad", "terrible", "awful", "boring", "hated", "hate", "lose"]
NEUTRAL = ["the", "a", "movie", "film", "was", "is", "plot", "actor", "story", "music", "game", "team", "it"]
PUNCT = [",", ".", "!", "?"]
WORDS = (
    POSITIVE
    + NEGATIVE
    + NEUTRAL
    + PUNCT
    + ["not", "very", "really", "and", "but", "play", "playing", "acting"]
)
LABEL_NAMES = ["negative", "positive"]


@dataclass(frozen=True)
class TinyBases:
    bert: Path
    bert_twin: Path
    mpnet: Path
    distilbert: Path
    adapter: Path
    texts: list[str]
    labels: list[int]


def _save(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None, path: Path) -> Path:
    model.save_pretrained(path, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def _bert_tokenizer() -> BertTokenizer:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *LABEL_NAMES, "##s", "##ing"]
    return BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})


def _mpnet_tokenizer() -> MPNetTokenizer:
    # No whole-word "playing"/"acting"/"negative": MPNet splits words BERT keeps whole.
    words = [w for w in WORDS if w not in {"playing", "acting"}]
    vocab = [
        "<s>",
        "<pad>",
        "</s>",
        "[UNK]",
        "<mask>",
        *words,
        "act",
        "neg",
        "##ative",
        "positive",
        "##s",
        "##ing",
    ]
    return MPNetTokenizer(vocab={w: i for i, w in enumerate(vocab)})


def _texts(n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    texts, labels = [], []
    for k in range(n):
        label = k % 2
        sentiment = rng.sample(POSITIVE if label else NEGATIVE, 2)
        body = rng.sample(NEUTRAL, 4) + sentiment + rng.sample(["playing", "acting", "really", "very"], 1)
        rng.shuffle(body)
        texts.append(" ".join(body) + rng.choice(PUNCT))
        labels.append(label)
    return texts, labels


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyBases:
    root = tmp_path_factory.mktemp("tiny_bases")
    torch.manual_seed(0)
    bert_tok = _bert_tokenizer()
    bert_cfg = BertConfig(
        vocab_size=len(bert_tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    bert = _save(BertModel(bert_cfg), bert_tok, root / "bert")
    bert_twin = _save(BertModel(bert_cfg), bert_tok, root / "bert_twin")
    mp_tok = _mpnet_tokenizer()
    mp_cfg = MPNetConfig(
        vocab_size=len(mp_tok),
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=66,
        pad_token_id=mp_tok.pad_token_id,
    )
    mpnet = _save(MPNetModel(mp_cfg), mp_tok, root / "mpnet")
    distil_cfg = DistilBertConfig(vocab_size=len(bert_tok), dim=32, n_layers=1, n_heads=4, hidden_dim=64)
    distilbert = _save(DistilBertModel(distil_cfg), bert_tok, root / "distilbert")

    # A real peft LoRA learnware on the tiny BERT: random A and B (a trained adapter's shape).
    source = BertModel.from_pretrained(bert)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], init_lora_weights=False)
    peft_model = get_peft_model(source, lora)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    adapter = root / "adapter"
    peft_model.save_pretrained(adapter)
    texts, labels = _texts(48, seed=1)
    return TinyBases(bert, bert_twin, mpnet, distilbert, adapter, texts, labels)
