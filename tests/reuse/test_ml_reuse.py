"""Merging and fine-tuning LoRA learnwares into new adapters, on a tiny BERT built here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from app.ml.adapters import read_lora_adapter
from app.ml.errors import InvalidInput
from app.ml.finetune import LoraClassifier
from app.ml.merging import merge_lora
from app.ml.packages import extract_package
from app.ml.reuse import HeldOut, finetune_lora_learnware, merge_lora_learnwares, package_model, split_shots
from tests.pave.conftest import LABELS, NAMES, TEXTS, make_tiny_bert


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def adapters(base: str, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = []
    for seed, labels in ((0, LABELS), (1, [1 - y for y in LABELS])):
        model = LoraClassifier.new(base, rank=4, alpha=8.0, seed=seed)
        model.fit(TEXTS, labels, NAMES, steps=6, lr=5e-3, batch_size=4, seed=seed)
        out.append(model.save(tmp_path_factory.mktemp(f"adapter{seed}")))
    return out


def test_read_adapter_gives_scaled_factors(adapters: list[Path]) -> None:
    deltas = read_lora_adapter(adapters[0])
    assert len(deltas) == 4  # 2 layers x (query, value)
    delta = next(iter(deltas.values()))
    assert delta.rank == 4 and delta.scale == pytest.approx(2.0)
    assert float(delta.B.abs().max()) > 0  # trained: B moved off zero


@pytest.mark.parametrize("method", ["iso_c", "ties", "task_arithmetic"])
def test_merged_adapter_reproduces_the_merge(
    base: str, adapters: list[Path], tmp_path: Path, method: str
) -> None:
    result = merge_lora_learnwares(adapters, base, method, {}, tmp_path / "merged", eval_names=NAMES)
    expected = merge_lora([read_lora_adapter(a) for a in adapters], method, {})
    written = read_lora_adapter(result.adapter_dir)
    assert set(written) == set(expected)
    for name, update in expected.items():
        want = update if isinstance(update, torch.Tensor) else update.dense()
        got = written[name].dense()
        assert torch.allclose(got, want, atol=1e-5 * float(want.abs().max()) + 1e-7), name
    # The merged adapter runs as a classifier over the same base.
    probs = LoraClassifier.load(base, result.adapter_dir).predict_proba(TEXTS, NAMES)
    assert probs.shape == (len(TEXTS), 2)


def test_merge_reports_heldout_accuracy_and_refuses_one_input(
    base: str, adapters: list[Path], tmp_path: Path
) -> None:
    shots = HeldOut([], np.zeros(0, np.int64), TEXTS, np.asarray(LABELS))
    result = merge_lora_learnwares(
        adapters, base, "iso_c", {}, tmp_path / "m", eval_names=NAMES, eval_shots=shots
    )
    assert result.heldout_accuracy is not None and 0.0 <= result.heldout_accuracy <= 1.0
    assert result.baseline_accuracy is not None
    with pytest.raises(InvalidInput, match="at least two"):
        merge_lora_learnwares(adapters[:1], base, "iso_c", {}, tmp_path / "one")


def test_split_shots_is_stratified_and_keeps_training_examples() -> None:
    held = split_shots(TEXTS, LABELS, 0.25, seed=0)
    assert sorted(held.test_labels.tolist()) == [0, 1]
    assert len(held.train_texts) == 6 and set(held.train_texts).isdisjoint(held.test_texts)
    with pytest.raises(InvalidInput, match="holdout"):
        split_shots(TEXTS, LABELS, 1.0, seed=0)


def test_finetune_learns_the_shots_and_packages(base: str, adapters: list[Path], tmp_path: Path) -> None:
    texts, labels = TEXTS * 3, LABELS * 3
    result = finetune_lora_learnware(
        adapters[1], base, texts, labels, NAMES, tmp_path / "tuned", steps=40, lr=3e-2, holdout=0.25, seed=0
    )
    assert result.details["n_train"] + result.details["n_heldout"] == len(texts)
    assert result.heldout_accuracy is not None and result.baseline_accuracy is not None
    # adapters[1] learned the flipped labels; fine-tuning on the true ones must help.
    assert result.heldout_accuracy > result.baseline_accuracy
    zip_path = package_model(
        result.adapter_dir,
        tmp_path / "tuned.zip",
        model_format="peft-lora",
        name="tuned",
        description="test",
        label_names=NAMES,
        base="all-MiniLM-L6-v2",
        inputs=TEXTS,
        license="MIT",
    )
    package = extract_package(zip_path, tmp_path / "extracted")
    assert package.manifest.model_format == "peft-lora" and package.inputs == TEXTS
