"""Sequence classifiers on one encoder share it: one copy of its weights, its outputs reused,
the answers exactly those of each model on its own."""

from __future__ import annotations

import copy
import gc
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertForSequenceClassification, BertModel

from app.ml.data import TextTask
from app.ml.packages import files_under
from app.ml.runners import HfSeqClsRunner, load_runner
from app.ml.runners.shared_body import (
    OUTPUTS,
    TEXT_ROWS,
    BodyOutputs,
    SharedBody,
    body_fingerprint,
    reads_first_token_only,
    share_body,
)

from .test_runners import NAMES, package_of, write_seqcls


def probe(tmp_path: Path, base_dir: Path, name: str, num_labels: int, seed: int) -> HfSeqClsRunner:
    """A sequence classifier of ``num_labels`` on the tiny encoder, its head drawn from ``seed``."""
    folder = tmp_path / name / "model"
    model = write_seqcls(base_dir, folder, num_labels)
    torch.manual_seed(seed)
    with torch.no_grad():
        model.classifier.weight.normal_(0, 1)
    model.save_pretrained(folder)
    runner = load_runner(
        package_of(
            tmp_path / name,
            {"model_format": "hf-seqcls", "label_names": NAMES[:num_labels]},
            dict(files_under(folder, "model")),
        )
    )
    assert isinstance(runner, HfSeqClsRunner)
    return runner


def own_answers(folder: Path, texts: list[str]) -> np.ndarray:
    """The model's probabilities on its own, as transformers runs it."""
    model = BertForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        enc = tokenizer(texts, padding=True, return_tensors="pt")
        return torch.softmax(model(**enc).logits, dim=-1).numpy()


def test_probes_on_one_encoder_share_it_and_answer_as_on_their_own(
    tmp_path: Path, tiny_base_dir: Path, tiny_test_task: TextTask
) -> None:
    first = probe(tmp_path, tiny_base_dir, "first", 3, seed=1)
    second = probe(tmp_path, tiny_base_dir, "second", 2, seed=2)
    assert first.shared is not None and second.shared is not None
    assert first.shared.body is second.shared.body  # one copy of the encoder's weights
    assert first.shared.by_text and second.shared.by_text  # BERT's head reads the pooled output only
    assert first.model.bert.embeddings is first.shared.body.embeddings  # read through to the encoder
    assert first.model.bert.config is first.shared.body.config

    texts = tiny_test_task.texts
    TEXT_ROWS.clear()
    hits = TEXT_ROWS.hits
    one = first.predict(texts, batch_size=4)
    assert TEXT_ROWS.hits == hits  # the first probe runs the encoder
    two = second.predict(texts[::-1], batch_size=3)  # other batches: the same texts
    assert TEXT_ROWS.hits - hits == len(set(texts))  # the second reads what it answered, text by text
    two = second.predict(texts, batch_size=4)

    for runner, answers, name in ((first, one, "first"), (second, two, "second")):
        assert answers.probs is not None
        expected = own_answers(tmp_path / name / "model", texts)
        np.testing.assert_allclose(answers.probs, expected, atol=1e-5)
        assert answers.probs.shape == (len(texts), len(runner.label_names))
    assert one.probs is not None and two.probs is not None
    assert not np.allclose(one.probs[:, :2], two.probs)  # two heads, two answers


def test_an_encoder_changed_by_one_value_is_not_shared(
    tmp_path: Path, tiny_base_dir: Path, tiny_test_task: TextTask
) -> None:
    first = probe(tmp_path, tiny_base_dir, "first", 3, seed=1)
    folder = tmp_path / "tuned" / "model"
    model = write_seqcls(tiny_base_dir, folder, 3)
    query = model.get_parameter("bert.encoder.layer.0.attention.self.query.weight")
    with torch.no_grad():
        query[0, 0] += 1e-3
    model.save_pretrained(folder)
    tuned = load_runner(
        package_of(tmp_path / "tuned", {"model_format": "hf-seqcls"}, dict(files_under(folder, "model")))
    )
    assert isinstance(tuned, HfSeqClsRunner)
    assert tuned.shared is not None and tuned.shared is not first.shared

    TEXT_ROWS.clear()
    first.predict(tiny_test_task.texts, batch_size=4)
    answers = tuned.predict(tiny_test_task.texts, batch_size=4)
    assert answers.probs is not None
    np.testing.assert_allclose(answers.probs, own_answers(folder, tiny_test_task.texts), atol=1e-5)


def test_the_fingerprint_ignores_the_classification_fields_only(tiny_base_dir: Path) -> None:
    three = BertForSequenceClassification.from_pretrained(tiny_base_dir, num_labels=3).eval()
    two = BertForSequenceClassification.from_pretrained(tiny_base_dir, num_labels=2).eval()
    cpu = torch.device("cpu")
    assert body_fingerprint(three.bert, three.config, cpu) == body_fingerprint(two.bert, two.config, cpu)
    two.config.layer_norm_eps = 1e-3  # read by the encoder itself
    assert body_fingerprint(three.bert, three.config, cpu) != body_fingerprint(two.bert, two.config, cpu)


def test_share_body_leaves_a_model_without_a_separate_encoder_alone() -> None:
    flat = torch.nn.Linear(2, 2)
    assert share_body(flat, torch.device("cpu")) is None
    assert isinstance(flat, torch.nn.Linear)


def test_remembered_outputs_stay_within_their_bytes() -> None:
    outputs = BodyOutputs(capacity_bytes=3 * 4 * 100)  # three tensors of 100 float32
    for i in range(5):
        outputs.put(("k", i), (torch.zeros(100),))
    assert len(outputs) == 3
    assert outputs.get(("k", 0)) is None and outputs.get(("k", 4)) is not None
    outputs.put(("huge",), torch.zeros(1000))  # larger than the whole capacity: not kept
    assert outputs.get(("huge",)) is None and len(outputs) == 3
    outputs.put(("cache",), {"last_hidden_state": torch.zeros(1), "past_key_values": object()})
    assert outputs.get(("cache",)) is None  # a size it cannot see: not kept
    outputs.put(("nested",), {"hidden": (torch.zeros(10), None), "pooled": [torch.zeros(2)]})
    assert outputs.get(("nested",)) is not None
    assert isinstance(SharedBody(torch.nn.Identity(), "x").body, torch.nn.Identity)


class Pooled(torch.nn.Module):
    """A classifier on an encoder that reads its last hidden state as ``read`` says."""

    base_model_prefix = "encoder"

    def __init__(self, encoder: torch.nn.Module, read: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.read = read

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.read == "first":
            return SimpleNamespace(logits=hidden[:, 0, :3])
        weights = attention_mask[..., None].float()
        return SimpleNamespace(logits=((hidden * weights).sum(1) / weights.sum(1))[:, :3])


def test_text_by_text_only_for_a_head_that_reads_the_first_token(
    tiny_base_dir: Path, tiny_test_task: TextTask
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_base_dir)
    batch = tokenizer(["a", "a longer text of several words"], padding=True, return_tensors="pt")
    cpu = torch.device("cpu")
    first = Pooled(BertModel.from_pretrained(tiny_base_dir).eval(), "first")
    mean = Pooled(BertModel.from_pretrained(tiny_base_dir).eval(), "mean")
    first_body, mean_body = share_body(first, cpu), share_body(mean, cpu)
    assert first_body is not None and mean_body is not None
    assert reads_first_token_only(first, first_body, batch["input_ids"], batch["attention_mask"])
    assert not reads_first_token_only(mean, mean_body, batch["input_ids"], batch["attention_mask"])
    # Padded on the left, the first token of a shorter text is a pad, and what the head reads
    # there depends on the batch: whole batches only.
    tokenizer.padding_side = "left"
    left = tokenizer(["a", "a longer text of several words"], padding=True, return_tensors="pt")
    assert not reads_first_token_only(first, first_body, left["input_ids"], left["attention_mask"])

    # The mean-pooling head keeps whole batches, and answers as its encoder alone does.
    OUTPUTS.clear()
    enc = tokenizer(tiny_test_task.texts[:6], padding=True, return_tensors="pt")
    with torch.no_grad():
        shared = mean(enc["input_ids"], enc["attention_mask"]).logits
        again = mean(enc["input_ids"], enc["attention_mask"]).logits
        plain = Pooled(BertModel.from_pretrained(tiny_base_dir).eval(), "mean")(
            enc["input_ids"], enc["attention_mask"]
        ).logits
    assert OUTPUTS.hits >= 1
    torch.testing.assert_close(shared, plain)
    torch.testing.assert_close(again, plain)


def test_a_dropped_encoder_is_freed_and_the_head_kept(tiny_base_dir: Path) -> None:
    cpu = torch.device("cpu")
    first = BertForSequenceClassification.from_pretrained(tiny_base_dir, num_labels=3).eval()
    second = BertForSequenceClassification.from_pretrained(tiny_base_dir, num_labels=2).eval()
    head = second.classifier.weight.detach().clone()
    own_encoder = weakref.ref(second.bert)
    kept, dropped = share_body(first, cpu), share_body(second, cpu)
    assert kept is not None and dropped is not None and dropped.body is kept.body
    gc.collect()
    assert own_encoder() is None  # nothing holds the second copy of the encoder
    torch.testing.assert_close(second.classifier.weight.detach(), head)


def test_a_shared_body_copies(tiny_base_dir: Path) -> None:
    model = BertForSequenceClassification.from_pretrained(tiny_base_dir, num_labels=3).eval()
    shared = share_body(model, torch.device("cpu"))
    assert shared is not None
    twin = copy.deepcopy(shared)
    assert twin.fingerprint == shared.fingerprint and twin.body is not shared.body
    with pytest.raises(AttributeError):
        _ = shared.no_such_attribute
