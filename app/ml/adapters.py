"""Reading a peft LoRA adapter folder as factors: the one reader that merging, reuse and transfer
share. Only safetensors weights are read, every key must be a LoRA A or B weight, and per-module
ranks and alphas (``rank_pattern``, ``alpha_pattern``) and rsLoRA scaling are honoured.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from peft.utils.other import get_pattern_key
from safetensors import SafetensorError
from safetensors.torch import load_file

from app.ml.errors import InvalidPackage
from app.ml.safetensors_header import read_safetensors_header

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$")
_PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoraFactors:
    """One module's update ΔW = scale·B·A, with B: d_out × r and A: r × d_in (float32)."""

    B: torch.Tensor
    A: torch.Tensor
    scale: float

    @property
    def rank(self) -> int:
        return int(self.A.shape[0])

    def dense(self) -> torch.Tensor:
        """scale·B·A computed in float64, returned as float32."""
        return (self.scale * (self.B.double() @ self.A.double())).float()


def read_lora_factors(adapter_dir: Path) -> dict[str, LoraFactors]:
    """{module path in the base (``encoder.layer.0.attention.self.query``): its factors}."""
    adapter_dir = Path(adapter_dir)
    config_path, weights_path = adapter_dir / ADAPTER_CONFIG, adapter_dir / ADAPTER_WEIGHTS
    if not config_path.is_file() or not weights_path.is_file():
        raise InvalidPackage(
            f"{adapter_dir} is not a peft adapter (needs {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        r_default = int(config["r"])
        alpha_default = float(config.get("lora_alpha", r_default))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise InvalidPackage(f"{adapter_dir} has no readable {ADAPTER_CONFIG}: {exc}") from exc
    if config.get("peft_type", "LORA") != "LORA":
        raise InvalidPackage(f"adapter {adapter_dir} is of type {config.get('peft_type')!r}, not LORA")
    if config.get("fan_in_fan_out"):
        raise InvalidPackage(f"adapter {adapter_dir} uses fan_in_fan_out, which only Conv1D layers need")
    rank_pattern: dict[str, int] = config.get("rank_pattern") or {}
    alpha_pattern: dict[str, float] = config.get("alpha_pattern") or {}
    rslora = bool(config.get("use_rslora", False))
    read_safetensors_header(weights_path, f"{adapter_dir.name}/{ADAPTER_WEIGHTS}")
    try:
        tensors = load_file(str(weights_path))
    except (OSError, SafetensorError) as exc:
        raise InvalidPackage(f"cannot read {weights_path.name}: {exc}") from exc

    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _LORA_KEY.match(key)
        if match is None:
            raise InvalidPackage(f"adapter {adapter_dir} holds {key!r}, which is not a LoRA A/B weight")
        pairs.setdefault(match["module"].removeprefix(_PEFT_PREFIX), {})[match["ab"]] = tensor
    if not pairs:
        raise InvalidPackage(f"adapter {adapter_dir} holds no LoRA weights")

    out: dict[str, LoraFactors] = {}
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise InvalidPackage(f"module {module!r} of adapter {adapter_dir} lacks lora_A or lora_B")
        a, b = ab["A"].float(), ab["B"].float()
        r = int(rank_pattern.get(get_pattern_key(list(rank_pattern), module), r_default))
        alpha = float(alpha_pattern.get(get_pattern_key(list(alpha_pattern), module), alpha_default))
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r:
            raise InvalidPackage(f"module {module!r}: A {tuple(a.shape)}, B {tuple(b.shape)} but rank {r}")
        out[module] = LoraFactors(B=b, A=a, scale=alpha / math.sqrt(r) if rslora else alpha / r)
    return out
