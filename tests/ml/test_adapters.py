"""The one LoRA adapter reader: per-module ranks and alphas, rsLoRA, and refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertModel

from app.ml.adapters import read_lora_adapter, read_lora_factors
from app.ml.errors import InvalidPackage


def _adapter(tmp_path: Path, **lora: object) -> tuple[Path, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    base = BertModel(config)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = get_peft_model(base, LoraConfig(target_modules=["query", "value"], **lora))  # type: ignore[arg-type]
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    model.save_pretrained(str(tmp_path))
    return tmp_path, before, model.merge_and_unload().state_dict()


def test_rank_and_alpha_patterns_and_rslora_give_peft_own_update(tmp_path: Path) -> None:
    folder, before, merged = _adapter(
        tmp_path, r=4, lora_alpha=8, use_rslora=True, rank_pattern={"value": 2}, alpha_pattern={"value": 3}
    )
    factors = read_lora_factors(folder)
    assert factors["encoder.layer.0.attention.self.query"].rank == 4
    assert factors["encoder.layer.0.attention.self.value"].rank == 2
    assert factors["encoder.layer.1.attention.self.value"].scale == pytest.approx(3 / math.sqrt(2))
    for module, f in factors.items():
        torch.testing.assert_close(
            before[f"{module}.weight"] + f.dense(), merged[f"{module}.weight"], atol=1e-5, rtol=0
        )


def test_anything_but_lora_weights_is_refused(tmp_path: Path) -> None:
    folder, _, _ = _adapter(tmp_path, r=2, lora_alpha=2)
    weights = load_file(str(folder / "adapter_model.safetensors"))
    save_file({**weights, "classifier.weight": torch.zeros(2, 16)}, str(folder / "adapter_model.safetensors"))
    with pytest.raises(InvalidPackage, match="not a LoRA A/B weight"):
        read_lora_factors(folder)
    save_file(
        {k: v for k, v in weights.items() if "lora_B" not in k}, str(folder / "adapter_model.safetensors")
    )
    with pytest.raises(InvalidPackage, match="lacks lora_A or lora_B"):
        read_lora_factors(folder)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3", "r": 2}))
    with pytest.raises(InvalidPackage, match="not LORA"):
        read_lora_factors(folder)
    (folder / "adapter_config.json").unlink()
    with pytest.raises(InvalidPackage, match="is not a peft adapter"):
        read_lora_factors(folder)


def test_the_merge_reader_names_the_weights_it_updates(tmp_path: Path) -> None:
    """``read_lora_adapter`` (what merging reads): the same factors, keyed by the weight they add to."""
    folder, before, merged = _adapter(tmp_path, r=4, lora_alpha=8)
    factors = read_lora_adapter(folder)
    assert sorted(factors) == sorted(
        f"encoder.layer.{i}.attention.self.{m}.weight" for i in range(2) for m in ("query", "value")
    )
    for name, delta in factors.items():
        assert delta.scale == 2.0
        torch.testing.assert_close(before[name] + delta.dense(), merged[name], atol=1e-5, rtol=0)
