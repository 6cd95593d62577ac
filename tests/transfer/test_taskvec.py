"""Task vectors from peft adapters, module maps, depth matching, LoRA adapters out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModel

from app.ml.adapters import lora_factorise, save_lora_adapter
from app.ml.errors import InvalidPackage
from app.ml.transfer.taskvec import (
    UnsupportedPair,
    depth_map,
    load_lora_task_vector,
    module_name,
    parse_module,
)
from tests.fixtures.tiny_bases import TinyBases


def test_depth_map_matches_nearest_source_layer() -> None:
    assert depth_map(6, 12) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert depth_map(12, 6) == [0, 2, 4, 7, 9, 11]
    assert depth_map(3, 3) == [0, 1, 2]
    assert depth_map(2, 3) == [0, 1, 1]
    assert depth_map(4, 1) == [3]


def test_module_maps_name_the_same_roles() -> None:
    assert module_name("bert", 3, "q") == "encoder.layer.3.attention.self.query"
    assert module_name("mpnet", 3, "q") == "encoder.layer.3.attention.attn.q"
    assert module_name("mpnet", 0, "o") == "encoder.layer.0.attention.attn.o"
    assert parse_module("bert", "base_model.model.bert.encoder.layer.11.output.dense") == (11, "ffn_out")
    assert parse_module("mpnet", "encoder.layer.2.intermediate.dense") == (2, "ffn_in")
    with pytest.raises(UnsupportedPair, match=r"pooler\.dense"):
        parse_module("bert", "pooler.dense")
    with pytest.raises(UnsupportedPair, match="gpt2"):
        module_name("gpt2", 0, "q")


def test_task_vector_is_what_peft_merges(tiny: TinyBases) -> None:
    tv = load_lora_task_vector(tiny.adapter, "bert")
    assert tv.rank == 4
    assert sorted(tv.deltas) == [(0, "q"), (0, "v"), (1, "q"), (1, "v")]
    base = AutoModel.from_pretrained(tiny.bert)
    reference = {n: p.detach().clone() for n, p in base.named_parameters()}
    merged = PeftModel.from_pretrained(base, tiny.adapter).merge_and_unload()
    weights = dict(merged.named_parameters())
    for name, delta in tv.module_deltas().items():
        expected = weights[f"{name}.weight"] - reference[f"{name}.weight"]
        torch.testing.assert_close(delta, expected, atol=1e-5, rtol=1e-4)


def test_adapter_without_lora_weights_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidPackage, match="not a peft adapter"):
        load_lora_task_vector(tmp_path, "bert")


def test_refactorisation_is_exact_at_the_update_rank() -> None:
    gen = torch.Generator().manual_seed(0)
    delta = torch.randn(20, 3, generator=gen) @ torch.randn(3, 30, generator=gen)
    a, b, err = lora_factorise(delta, 3)
    assert a.shape == (3, 30) and b.shape == (20, 3)
    assert err < 1e-6
    torch.testing.assert_close(b @ a, delta, atol=1e-5, rtol=1e-5)
    _, _, err_low = lora_factorise(delta, 1)
    assert 0.1 < err_low < 1.0
    a_pad, b_pad, _ = lora_factorise(delta[:2, :2], 4)
    assert a_pad.shape == (4, 2) and b_pad.shape == (2, 4)


def test_saved_adapter_loads_in_peft_on_the_target(tiny: TinyBases, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(1)
    deltas = {
        module_name("mpnet", j, role): torch.randn(48, 2, generator=gen) @ torch.randn(2, 48, generator=gen)
        for j in range(3)
        for role in ("q", "v")
    }
    errors = save_lora_adapter(tmp_path / "out", deltas, 2, str(tiny.mpnet))
    assert max(errors.values()) < 1e-6
    base = AutoModel.from_pretrained(tiny.mpnet)
    reference = {n: p.detach().clone() for n, p in base.named_parameters()}
    merged = PeftModel.from_pretrained(base, tmp_path / "out").merge_and_unload()
    weights = dict(merged.named_parameters())
    for name, delta in deltas.items():
        torch.testing.assert_close(
            weights[f"{name}.weight"] - reference[f"{name}.weight"], delta, atol=1e-5, rtol=1e-4
        )
    assert load_lora_task_vector(tmp_path / "out", "mpnet").rank == 2
