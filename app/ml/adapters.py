"""peft LoRA adapter folders, read and written in one place for merging, reuse and transfer.

Reading: only safetensors weights are read, every key must be a LoRA A or B weight, and
per-module ranks and alphas (``rank_pattern``, ``alpha_pattern``) and rsLoRA scaling are
honoured. Writing: dense updates refactorised at a rank (truncated SVD), scale 1.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import LoraConfig
from peft.utils.other import get_pattern_key
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from app.ml.errors import InvalidInput, InvalidPackage
from app.ml.safetensors_header import read_safetensors_header

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$")
_PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoraDelta:
    """A low-rank update of one weight, τ = scale·B·A with B: m×r and A: r×n."""

    B: Tensor
    A: Tensor
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.B.dim() != 2 or self.A.dim() != 2 or self.B.shape[1] != self.A.shape[0]:
            raise InvalidInput(
                f"LoRA factors need B: m×r and A: r×n, got B {tuple(self.B.shape)} and A {tuple(self.A.shape)}"
            )

    @property
    def shape(self) -> tuple[int, int]:
        """(m, n), the shape of the dense update."""
        return int(self.B.shape[0]), int(self.A.shape[1])

    @property
    def rank(self) -> int:
        """r, the inner dimension of the factors."""
        return int(self.A.shape[0])

    def dense(self) -> Tensor:
        """scale·B·A as a float32 matrix."""
        return (self.scale * (self.B.to(torch.float64) @ self.A.to(torch.float64))).to(torch.float32)


def read_lora_factors(adapter_dir: Path) -> dict[str, LoraDelta]:
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

    out: dict[str, LoraDelta] = {}
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise InvalidPackage(f"module {module!r} of adapter {adapter_dir} lacks lora_A or lora_B")
        a, b = ab["A"].float(), ab["B"].float()
        r = int(rank_pattern.get(get_pattern_key(list(rank_pattern), module), r_default))
        alpha = float(alpha_pattern.get(get_pattern_key(list(alpha_pattern), module), alpha_default))
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r:
            raise InvalidPackage(f"module {module!r}: A {tuple(a.shape)}, B {tuple(b.shape)} but rank {r}")
        out[module] = LoraDelta(B=b, A=a, scale=alpha / math.sqrt(r) if rslora else alpha / r)
    return out


def read_lora_adapter(adapter_dir: Path) -> dict[str, LoraDelta]:
    """A peft LoRA adapter as {base weight name: LoraDelta(B, A, scale)}."""
    return {f"{module}.weight": delta for module, delta in read_lora_factors(adapter_dir).items()}


def lora_factorise(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Truncated SVD ΔW ≈ B·A at ``rank`` (balanced factors); returns A, B and the relative error."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    d = delta.double()
    u, s, vh = torch.linalg.svd(d, full_matrices=False)
    k = min(rank, s.numel())
    root = s[:k].sqrt()
    b = u[:, :k] * root
    a = root[:, None] * vh[:k]
    if k < rank:  # pad with zero directions so every module keeps the declared rank
        b = torch.cat([b, b.new_zeros(b.shape[0], rank - k)], dim=1)
        a = torch.cat([a, a.new_zeros(rank - k, a.shape[1])], dim=0)
    total = float(s.pow(2).sum())
    error = math.sqrt(float(s[k:].pow(2).sum()) / total) if total > 0 else 0.0
    return a.float().contiguous(), b.float().contiguous(), error


def save_lora_adapter(
    out_dir: Path, deltas: Mapping[str, torch.Tensor], rank: int, base_name: str
) -> dict[str, float]:
    """Write ``deltas`` (module path → ΔW) as a peft LoRA adapter of ``rank`` with scale 1.

    Returns the relative Frobenius error of each module's rank-``rank`` refactorisation (zero
    up to rounding whenever ΔW already has rank ≤ ``rank``, as a transferred LoRA update does).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    errors: dict[str, float] = {}
    for module, delta in sorted(deltas.items()):
        a, b, err = lora_factorise(delta, rank)
        tensors[f"base_model.model.{module}.lora_A.weight"] = a
        tensors[f"base_model.model.{module}.lora_B.weight"] = b
        errors[module] = err
    config = LoraConfig(
        r=rank,
        lora_alpha=rank,
        target_modules=sorted(deltas),
        lora_dropout=0.0,
        bias="none",
        base_model_name_or_path=base_name,
    )
    config.save_pretrained(str(out_dir))
    save_file(tensors, str(out_dir / ADAPTER_WEIGHTS))
    return errors


# adapter_config.json fields that change what the adapter computes; the rest (peft_version,
# base_model_name_or_path, task_type, ...) is informational and ignored.
LORA_FIELDS = (
    "r",
    "lora_alpha",
    "target_modules",
    "exclude_modules",
    "lora_dropout",
    "bias",
    "fan_in_fan_out",
    "use_rslora",
    "use_dora",
    "lora_bias",
    "layers_to_transform",
    "layers_pattern",
    "rank_pattern",
    "alpha_pattern",
)
# Fields that would train or load something beyond LoRA matrices (whole modules, tokens).
REFUSED_FIELDS = ("modules_to_save", "trainable_token_indices", "layer_replication", "target_parameters")


def read_lora_config(path: Path) -> LoraConfig:
    """The LoraConfig of ``adapter_config.json``, refusing other PEFT types and extra modules."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidPackage(f"cannot read {path.name}: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidPackage(f"{path.name} must be a JSON object")
    if raw.get("peft_type", "LORA") != "LORA":
        raise InvalidPackage(f"adapter is of PEFT type {raw.get('peft_type')!r}; only LORA is supported")
    for key in REFUSED_FIELDS:
        if raw.get(key):
            raise InvalidPackage(f"adapter sets {key}={raw[key]!r}: only LoRA matrices are accepted")
    if not raw.get("target_modules"):
        raise InvalidPackage(f"{path.name} names no target_modules")
    try:
        return LoraConfig(**{k: raw[k] for k in LORA_FIELDS if k in raw and raw[k] is not None})
    except (TypeError, ValueError) as exc:
        raise InvalidPackage(f"invalid LoRA settings in {path.name}: {exc}") from exc
