"""Transfer from a wider, deeper base to a narrower, shallower one (MPNet-base → MiniLM-L6 in
the benchmark; here the tiny 3-layer, 48-wide MPNet → the tiny 2-layer, 32-wide BERT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import MPNetModel

from app.ml.encoders import load_encoder
from app.ml.errors import InvalidInput
from app.ml.transfer import transfer_learnware
from app.ml.transfer.bico import (
    LayerPair,
    _tokenise,
    collect_cross_stats,
    fan_in,
    layer_pairs,
    row_assignments,
    transfer_task_vector,
)
from app.ml.transfer.taskvec import TaskVector, linear_modules, load_lora_task_vector, module_name
from tests.fixtures.tiny_bases import LABEL_NAMES, TinyBases


@pytest.fixture(scope="module")
def mpnet_adapter(tiny: TinyBases, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real peft LoRA learnware (r = 4 on q and v of every layer) on the tiny MPNet."""
    torch.manual_seed(1)
    model = get_peft_model(
        MPNetModel.from_pretrained(tiny.mpnet),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q", "v"], init_lora_weights=False),
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    folder = tmp_path_factory.mktemp("mpnet_adapter")
    model.save_pretrained(folder)
    return folder


def _tv(layers: int, roles: tuple[str, ...] = ("q", "v")) -> TaskVector:
    deltas = {(i, r): torch.full((2, 2), float(i + 1)) for i in range(layers) for r in roles}
    return TaskVector("bert", deltas, 1)


def test_a_shallower_target_receives_every_source_layer() -> None:
    pairs = layer_pairs(_tv(12), 12, 6, "bert", "all")
    links = sorted({(p.source_layer, p.target_layer) for p in pairs})
    # MPNet's 12 layers onto MiniLM's 6: two consecutive source layers per target layer
    assert links == [(i, i // 2) for i in range(12)]
    assert fan_in(pairs) == 2
    nearest = layer_pairs(_tv(12), 12, 6, "bert", "nearest")
    assert sorted({(p.source_layer, p.target_layer) for p in nearest}) == [
        (0, 0), (2, 1), (4, 2), (7, 3), (9, 4), (11, 5)
    ]  # fmt: skip
    assert set(nearest) <= set(pairs) and fan_in(nearest) == 1


def test_a_deeper_target_is_unchanged_by_the_layer_map() -> None:
    # MiniLM's 6 layers onto MPNet's 12: each source layer copied into two target layers
    for layers in ("all", "nearest"):
        pairs = layer_pairs(_tv(6), 6, 12, "mpnet", layers)  # type: ignore[arg-type]
        assert sorted({(p.source_layer, p.target_layer) for p in pairs}) == [(j // 2, j) for j in range(12)]
        assert fan_in(pairs) == 1
    with pytest.raises(InvalidInput, match="layer map"):
        layer_pairs(_tv(6), 6, 12, "mpnet", "middle")  # type: ignore[arg-type]


def test_folded_layers_add_their_moved_updates(tiny: TinyBases, mpnet_adapter: Path) -> None:
    source, target = load_encoder(tiny.mpnet, fresh=True), load_encoder(tiny.bert, fresh=True)
    tv = load_lora_task_vector(mpnet_adapter, "mpnet")
    pairs = layer_pairs(tv, source.num_layers, target.num_layers, "bert", "all")
    assert {(p.source_layer, p.target_layer) for p in pairs} == {(0, 0), (1, 1), (2, 1)}
    (stats,) = collect_cross_stats(source, target, pairs, tiny.texts, tiny.labels, LABEL_NAMES)
    shapes = {
        k: m.weight.shape for k, m in linear_modules(target.model, "bert", [p.target for p in pairs]).items()
    }
    folded, maps = transfer_task_vector(tv, pairs, shapes, "bico", stats, "bert")
    assert len(maps) == len(pairs) and folded.rank == 8
    for role in ("q", "v"):
        alone = [
            transfer_task_vector(tv, [LayerPair(role, i, 1)], shapes, "bico", stats, "bert")[0].deltas[
                (1, role)
            ]
            for i in (1, 2)
        ]
        torch.testing.assert_close(folded.deltas[(1, role)], alone[0] + alone[1])
        assert folded.deltas[(1, role)].shape == (32, 32)


def test_transfer_to_narrower_shallower_base_gives_an_exact_adapter(
    tiny: TinyBases, mpnet_adapter: Path, tmp_path: Path
) -> None:
    result = transfer_learnware(
        "bico", mpnet_adapter, tiny.mpnet, tiny.bert, tiny.texts, tiny.labels, LABEL_NAMES, {"layers": "all"}
    )
    assert result.kind == "adapter" and result.target_model_type == "bert"
    assert set(result.deltas) == {module_name("bert", j, r) for j in range(2) for r in ("q", "v")}
    assert all(d.shape == (32, 32) for d in result.deltas.values())
    # layer 1 holds two rank-4 updates: the adapter is saved at rank 8, so it stays exact
    assert result.rank == 8
    ranks = {name: int(torch.linalg.matrix_rank(d.double(), rtol=1e-6)) for name, d in result.deltas.items()}
    assert ranks[module_name("bert", 0, "q")] <= 4 < ranks[module_name("bert", 1, "q")] <= 8
    out = result.save(tmp_path / "transferred")
    meta = json.loads((out / "transfer.json").read_text())
    assert meta["rank"] == 8 and meta["stats"]["refactorisation_error_max"] < 1e-5
    back = load_lora_task_vector(out, "bert")
    for name, delta in back.module_deltas().items():
        torch.testing.assert_close(delta, result.deltas[name], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("method", ["theseus", "naive", "utd"])
def test_other_methods_run_in_this_direction(tiny: TinyBases, mpnet_adapter: Path, method: str) -> None:
    result = transfer_learnware(
        method, mpnet_adapter, tiny.mpnet, tiny.bert, tiny.texts, tiny.labels, LABEL_NAMES
    )
    if method == "utd":
        assert result.operator is not None and result.operator.dim == 32  # the target's width
    else:
        assert all(d.shape == (32, 32) for d in result.deltas.values()) and result.rank == 4


def test_by_default_each_target_layer_takes_its_nearest_source_layer(
    tiny: TinyBases, mpnet_adapter: Path
) -> None:
    nearest = transfer_learnware(
        "naive", mpnet_adapter, tiny.mpnet, tiny.bert, tiny.texts, tiny.labels, LABEL_NAMES
    )
    tau = load_lora_task_vector(mpnet_adapter, "mpnet").deltas
    # naive truncates 48 → 32 on both sides: target layer 1 holds source layer 2's update alone
    assert nearest.rank == 4 and nearest.params["layers"] == "nearest"
    torch.testing.assert_close(nearest.deltas[module_name("bert", 1, "q")], tau[(2, "q")][:32, :32])
    folded = transfer_learnware(
        "naive", mpnet_adapter, tiny.mpnet, tiny.bert, tiny.texts, tiny.labels, LABEL_NAMES, {"layers": "all"}
    )
    torch.testing.assert_close(
        folded.deltas[module_name("bert", 1, "q")], (tau[(1, "q")] + tau[(2, "q")])[:32, :32]
    )


def test_word_matching_is_the_same_both_ways(tiny: TinyBases) -> None:
    bert, mpnet = load_encoder(tiny.bert), load_encoder(tiny.mpnet)
    texts = ["the acting was great !", "playing it , really", "not very fun but the music"]
    inputs_a, words_a = _tokenise(mpnet.tokenizer, texts, 32)
    inputs_b, words_b = _tokenise(bert.tokenizer, texts, 32)
    len_a, len_b = inputs_a["input_ids"].shape[1], inputs_b["input_ids"].shape[1]
    p_ab = row_assignments(words_a, words_b, len_a, len_b, "word")
    p_ba = row_assignments(words_b, words_a, len_b, len_a, "word")
    # 5 + 4 + 6 words and two special tokens per text, whichever base is the source
    assert p_ab[0].shape[0] == p_ba[0].shape[0] == 21
    torch.testing.assert_close(p_ab[0], p_ba[1])
    torch.testing.assert_close(p_ab[1], p_ba[0])
    # the split MPNet word ("act" + "##ing") is averaged on the source side now
    assert sorted(p_ab[0][2][p_ab[0][2] > 0].tolist()) == [0.5, 0.5]
