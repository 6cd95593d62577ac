"""BiCo and its baselines on tiny bases of different widths and depths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app.ml.encoders import load_encoder
from app.ml.transfer import METHODS, transfer_learnware
from app.ml.transfer.bico import (
    _tokenise,
    collect_cross_stats,
    layer_pairs,
    pair_maps,
    procrustes,
    row_assignments,
)
from app.ml.transfer.taskvec import load_lora_task_vector, module_name
from tests.fixtures.tiny_bases import LABEL_NAMES, TinyBases

ADAPTER_METHODS = [name for name, m in METHODS.items() if m.output == "adapter"]


def _eye(n: int) -> torch.Tensor:
    return torch.eye(n, dtype=torch.float64)


def test_procrustes_is_semi_orthogonal_both_ways() -> None:
    gen = torch.Generator().manual_seed(0)
    wide = procrustes(torch.randn(5, 9, generator=gen, dtype=torch.float64))
    tall = procrustes(torch.randn(9, 5, generator=gen, dtype=torch.float64))
    assert wide.shape == (5, 9) and tall.shape == (9, 5)
    torch.testing.assert_close(wide @ wide.T, _eye(5))
    torch.testing.assert_close(tall.T @ tall, _eye(5))


@pytest.mark.parametrize("direction", ["bert_to_mpnet", "mpnet_to_bert"])
def test_calibrated_maps_are_semi_orthogonal(tiny: TinyBases, direction: str) -> None:
    src_path, tgt_path = (tiny.bert, tiny.mpnet) if direction == "bert_to_mpnet" else (tiny.mpnet, tiny.bert)
    source, target = load_encoder(src_path, fresh=True), load_encoder(tgt_path, fresh=True)
    tv = load_lora_task_vector(tiny.adapter, "bert")
    if direction == "mpnet_to_bert":  # a task vector of the MPNet's shape on its first layers
        gen = torch.Generator().manual_seed(0)
        tv = type(tv)("mpnet", {k: torch.randn(48, 48, generator=gen) for k in [(0, "q"), (2, "v")]}, 48)
    pairs = layer_pairs(tv, source.num_layers, target.num_layers, target.model_type)
    (stats,) = collect_cross_stats(source, target, pairs, tiny.texts, tiny.labels, LABEL_NAMES)
    small = min(source.hidden_size, target.hidden_size)
    for pair in pairs:
        shape_a = tv.deltas[pair.source].shape
        shape_b = torch.Size([target.hidden_size, target.hidden_size])
        for mode in ("bico", "theseus", "input_only", "output_only"):
            maps = pair_maps(mode, stats, pair, shape_a, shape_b)
            for r in (maps.r_in, maps.r_out):
                assert r.shape == (source.hidden_size, target.hidden_size)
                gram = r @ r.T if source.hidden_size <= target.hidden_size else r.T @ r
                torch.testing.assert_close(gram, _eye(small), atol=1e-8, rtol=0)


def test_transfer_to_wider_deeper_base_gives_a_peft_adapter(tiny: TinyBases, tmp_path: Path) -> None:
    result = transfer_learnware(
        "bico", tiny.adapter, tiny.bert, tiny.mpnet, tiny.texts, tiny.labels, LABEL_NAMES
    )
    assert result.kind == "adapter" and result.target_model_type == "mpnet"
    expected = {module_name("mpnet", j, role) for j in range(3) for role in ("q", "v")}
    assert set(result.deltas) == expected
    assert all(d.shape == (48, 48) for d in result.deltas.values())
    # τ_B = R_outᵀ τ_A R_in keeps the source rank, so the saved rank-4 adapter is exact.
    assert all(torch.linalg.matrix_rank(d.double(), rtol=1e-6) <= 4 for d in result.deltas.values())
    out = result.save(tmp_path / "transferred")
    meta = json.loads((out / "transfer.json").read_text())
    assert meta["method"] == "bico" and meta["rank"] == 4
    assert meta["stats"]["refactorisation_error_max"] < 1e-5
    back = load_lora_task_vector(out, "mpnet")
    for name, delta in back.module_deltas().items():
        torch.testing.assert_close(delta, result.deltas[name], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("method", ADAPTER_METHODS)
def test_same_model_same_data_is_the_identity(tiny: TinyBases, method: str) -> None:
    result = transfer_learnware(
        method, tiny.adapter, tiny.bert, tiny.bert, tiny.texts, tiny.labels, LABEL_NAMES
    )
    tau_a = load_lora_task_vector(tiny.adapter, "bert").module_deltas()
    assert set(result.deltas) == set(tau_a)
    for name, delta in tau_a.items():
        torch.testing.assert_close(result.deltas[name], delta, atol=1e-5, rtol=1e-4)


def test_other_base_of_same_shape_is_not_the_identity(tiny: TinyBases) -> None:
    result = transfer_learnware(
        "bico", tiny.adapter, tiny.bert, tiny.bert_twin, tiny.texts, tiny.labels, LABEL_NAMES
    )
    tau_a = load_lora_task_vector(tiny.adapter, "bert").module_deltas()
    for name, delta in tau_a.items():
        moved = result.deltas[name]
        assert not torch.allclose(moved, delta, atol=1e-3)
        torch.testing.assert_close(
            moved.norm(), delta.norm(), atol=1e-4, rtol=1e-4
        )  # Procrustes keeps the norm


def test_pseudo_labels_come_from_the_learnware(tiny: TinyBases) -> None:
    result = transfer_learnware(
        "bico", tiny.adapter, tiny.bert, tiny.mpnet, tiny.texts, None, LABEL_NAMES, {"alpha": 0.5}
    )
    assert result.pseudo_labelled
    assert result.params["alpha"] == 0.5
    labelled = transfer_learnware(
        "theseus", tiny.adapter, tiny.bert, tiny.mpnet, tiny.texts, None, LABEL_NAMES
    )
    assert not labelled.pseudo_labelled  # no backward pass, no labels needed


def test_words_are_matched_across_tokenizers(tiny: TinyBases) -> None:
    bert, mpnet = load_encoder(tiny.bert), load_encoder(tiny.mpnet)
    texts = ["the acting was great !", "playing it , really"]
    inputs_a, words_a = _tokenise(bert.tokenizer, texts, 32)
    inputs_b, words_b = _tokenise(mpnet.tokenizer, texts, 32)
    len_a, len_b = inputs_a["input_ids"].shape[1], inputs_b["input_ids"].shape[1]
    p_a, p_b = row_assignments(words_a, words_b, len_a, len_b, "word")
    # 5 + 4 words, plus the first and last special token of each text
    assert p_a.shape[0] == p_b.shape[0] == 13
    torch.testing.assert_close(p_a.sum(dim=1), torch.ones(13))
    torch.testing.assert_close(p_b.sum(dim=1), torch.ones(13))
    # "acting" is one BERT token and two MPNet tokens ("act", "##ing"): one row, averaged
    assert sorted(p_b[2][p_b[2] > 0].tolist()) == [0.5, 0.5]
    p_a, p_b = row_assignments(words_a, words_b, len_a, len_b, "pooled")
    assert p_a.shape[0] == p_b.shape[0] == 2


def test_nested_checkpoints_equal_separate_passes(tiny: TinyBases) -> None:
    source, target = load_encoder(tiny.bert, fresh=True), load_encoder(tiny.mpnet, fresh=True)
    tv = load_lora_task_vector(tiny.adapter, "bert")
    pairs = layer_pairs(tv, source.num_layers, target.num_layers, "mpnet")
    nested = collect_cross_stats(
        source, target, pairs, tiny.texts, tiny.labels, LABEL_NAMES, checkpoints=[16, 48]
    )
    (first,) = collect_cross_stats(source, target, pairs, tiny.texts[:16], tiny.labels[:16], LABEL_NAMES)
    assert nested[0].examples == 16 and nested[1].examples == 48
    assert nested[0].rows == first.rows
    for key, value in first.sums.items():
        torch.testing.assert_close(nested[0].sums[key], value, atol=1e-6, rtol=1e-6)
        assert not torch.allclose(nested[1].sums[key], value)
