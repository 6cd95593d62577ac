"""Merging full fine-tunes of a tiny BERT base packaged as sequence classifiers: the encoders
merge against the base tensor by tensor, the heads form the union of the label sets, the result
loads in transformers with no missing weight, and models of another base are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    BertTokenizer,
)

from app.ml.errors import InvalidInput
from app.ml.merging.full import classifier_accuracy, merge_full_learnwares, merge_full_with_eval
from tests.fixtures.tiny_bases import TinyBases

SENTIMENT = ["negative", "positive"]
TOPICS = ["positive", "sports", "news"]


def full_finetune(base: Path, names: list[str], out: Path, seed: int, **changes: int) -> Path:
    """The base's encoder with every tensor moved a little, and a random head of ``names``
    (with ``changes`` to the config: another architecture, randomly initialised)."""
    torch.manual_seed(seed)
    config = BertConfig.from_pretrained(base, num_labels=len(names), **changes)
    model = BertForSequenceClassification(config)
    if not changes:
        model.bert.load_state_dict(BertModel.from_pretrained(base).state_dict())
    with torch.no_grad():
        for param in model.bert.parameters():
            param.add_(0.02 * torch.randn_like(param))
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {n: i for i, n in enumerate(names)}
    model.save_pretrained(out)
    BertTokenizer.from_pretrained(base).save_pretrained(out)
    return out


@pytest.fixture
def finetunes(tiny: TinyBases, tmp_path: Path) -> list[Path]:
    return [
        full_finetune(tiny.bert, SENTIMENT, tmp_path / "sentiment", 1),
        full_finetune(tiny.bert, TOPICS, tmp_path / "topics", 2),
    ]


def test_task_arithmetic_of_full_finetunes_and_the_union_head(
    tiny: TinyBases, finetunes: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "merged"
    names, stats = merge_full_learnwares(
        finetunes, [SENTIMENT, TOPICS], str(tiny.bert), "task_arithmetic", {"lam": 0.5}, out
    )
    assert names == ["negative", "positive", "sports", "news"]
    base = load_file(str(tiny.bert / "model.safetensors"))
    inputs = [load_file(str(f / "model.safetensors")) for f in finetunes]
    merged = load_file(str(out / "model.safetensors"))
    assert stats.tensors == len(base) and stats.unchanged == 0
    for name, weight in base.items():
        expected = weight + 0.5 * sum(m[f"bert.{name}"] - weight for m in inputs)
        torch.testing.assert_close(merged[f"bert.{name}"], expected, rtol=1e-5, atol=1e-6)
    # "positive" is in both label sets: its row is the mean of the two heads' rows.
    w0, w1 = inputs[0]["classifier.weight"], inputs[1]["classifier.weight"]
    torch.testing.assert_close(merged["classifier.weight"][1], (w0[1] + w1[0]) / 2)
    torch.testing.assert_close(merged["classifier.weight"][3], w1[2])
    config = json.loads((out / "config.json").read_text())
    assert config["num_labels"] == 4 and config["id2label"]["2"] == "sports"
    model, info = AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"] and model.config.num_labels == 4


def test_iso_c_merge_measures_itself_and_the_first_input(
    tiny: TinyBases, finetunes: list[Path], tmp_path: Path
) -> None:
    texts, labels = tiny.texts[:12], tiny.labels[:12]
    result = merge_full_with_eval(
        finetunes, [SENTIMENT, TOPICS], str(tiny.bert), "iso_c", {"alpha": 1.0}, tmp_path / "merged",
        eval_texts=texts, eval_labels=labels, eval_names=SENTIMENT,
    )  # fmt: skip
    assert result.label_names == ["negative", "positive", "sports", "news"]
    assert result.heldout_accuracy is not None and 0.0 <= result.heldout_accuracy <= 1.0
    # The first input used as it is, predicting among the eval's classes only.
    model = AutoModelForSequenceClassification.from_pretrained(finetunes[0]).eval()
    tokenizer = BertTokenizer.from_pretrained(finetunes[0])
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    expected = float((logits.argmax(-1).numpy() == np.asarray(labels)).mean())
    assert result.first_input_accuracy == pytest.approx(expected)
    # Classes a model does not have: no accuracy rather than a wrong one.
    assert classifier_accuracy(finetunes[0], SENTIMENT, texts, np.asarray(labels), ["sports", "news"]) is None


def test_models_of_another_base_are_refused(tiny: TinyBases, finetunes: list[Path], tmp_path: Path) -> None:
    wider = full_finetune(tiny.bert, SENTIMENT, tmp_path / "wider", 3, hidden_size=64, intermediate_size=128)
    with pytest.raises(InvalidInput, match=r"not full fine-tunes of .*hidden_size 64"):
        merge_full_learnwares(
            [finetunes[0], wider], [SENTIMENT, SENTIMENT], str(tiny.bert), "iso_c", {}, tmp_path / "out"
        )
    # Same width, another feed-forward size: the driver finds the first tensor that differs.
    other = full_finetune(tiny.bert, SENTIMENT, tmp_path / "other", 4, intermediate_size=48)
    with pytest.raises(
        InvalidInput,
        match=r"not full fine-tunes of .*intermediate\.dense\.bias: fine-tuned model 1 has shape \(48,\)",
    ):
        merge_full_learnwares(
            [finetunes[0], other], [SENTIMENT, SENTIMENT], str(tiny.bert), "iso_c", {}, tmp_path / "out1"
        )
    with pytest.raises(InvalidInput, match="only fine-tunes of the same base"):
        merge_full_learnwares(finetunes, [SENTIMENT, TOPICS], str(tiny.mpnet), "iso_c", {}, tmp_path / "out2")
    with pytest.raises(InvalidInput, match="at least two"):
        merge_full_learnwares(finetunes[:1], [SENTIMENT], str(tiny.bert), "iso_c", {}, tmp_path / "out3")


def test_integer_buffers_of_the_base_are_not_weights(
    tiny: TinyBases, finetunes: list[Path], tmp_path: Path
) -> None:
    # Older checkpoints (the real MiniLM's) keep position_ids; fine-tunes saved today do not.
    base = tmp_path / "old-base"
    shutil.copytree(tiny.bert, base)
    weights = load_file(str(base / "model.safetensors"))
    weights["embeddings.position_ids"] = torch.arange(64)[None, :]
    save_file(weights, str(base / "model.safetensors"))
    _, stats = merge_full_learnwares(
        finetunes, [SENTIMENT, TOPICS], str(base), "iso_c", {}, tmp_path / "merged"
    )
    assert stats.tensors == len(weights) - 1
    assert "bert.embeddings.position_ids" not in load_file(str(tmp_path / "merged" / "model.safetensors"))
