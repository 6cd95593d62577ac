"""Task vectors of LoRA learnwares, per-architecture module maps, and LoRA adapters out.

A task vector is the dense update of every adapted linear layer, ΔW = scale·B·A, keyed by
(layer index, role). Roles name a linear layer's job in a transformer block so that layers of
different families can be matched: BERT ``attention.self.query`` and MPNet ``attention.attn.q``
are both role ``q``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from app.ml.adapters import read_lora_factors
from app.ml.errors import DockError, InvalidPackage

ROLES = ("q", "k", "v", "o", "ffn_in", "ffn_out")
# Roles whose linear layers read the same tensor: their input statistics are collected once.
INPUT_GROUP: dict[str, str] = {
    "q": "attn_in",
    "k": "attn_in",
    "v": "attn_in",
    "o": "o",
    "ffn_in": "ffn_in",
    "ffn_out": "ffn_out",
}

_BERT = {
    "q": "encoder.layer.{i}.attention.self.query",
    "k": "encoder.layer.{i}.attention.self.key",
    "v": "encoder.layer.{i}.attention.self.value",
    "o": "encoder.layer.{i}.attention.output.dense",
    "ffn_in": "encoder.layer.{i}.intermediate.dense",
    "ffn_out": "encoder.layer.{i}.output.dense",
}
_MPNET = {
    "q": "encoder.layer.{i}.attention.attn.q",
    "k": "encoder.layer.{i}.attention.attn.k",
    "v": "encoder.layer.{i}.attention.attn.v",
    "o": "encoder.layer.{i}.attention.attn.o",
    "ffn_in": "encoder.layer.{i}.intermediate.dense",
    "ffn_out": "encoder.layer.{i}.output.dense",
}
# Module path (relative to the bare encoder, e.g. ``BertModel``) of each role, per architecture.
MODULE_MAPS: dict[str, dict[str, str]] = {
    "bert": _BERT,
    "roberta": _BERT,
    "xlm-roberta": _BERT,
    "mpnet": _MPNET,
}


Key = tuple[int, str]
"""(layer index, role)"""


class UnsupportedPair(DockError):
    """A source/target architecture without a module map, or a module outside the map."""


def module_map(model_type: str) -> dict[str, str]:
    """Role → module path template of an architecture; UnsupportedPair when unknown."""
    try:
        return MODULE_MAPS[model_type]
    except KeyError:
        known = ", ".join(sorted(MODULE_MAPS))
        raise UnsupportedPair(f"no module map for architecture {model_type!r}; supported: {known}") from None


def module_name(model_type: str, layer: int, role: str) -> str:
    return module_map(model_type)[role].format(i=layer)


def parse_module(model_type: str, name: str) -> Key:
    """(layer, role) of a module path; any prefix before ``encoder.`` (``bert.``…) is ignored."""
    for role, template in module_map(model_type).items():
        pattern = re.escape(template).replace(re.escape("{i}"), r"(\d+)")
        match = re.search(rf"(?:^|\.)({pattern})$", name)
        if match:
            return int(match.group(2)), role
    raise UnsupportedPair(f"module {name!r} has no role in the {model_type!r} module map")


def depth_map(source_layers: int, target_layers: int) -> list[int]:
    """Source layer of each target layer: i(j) = round(j·(L_A−1)/(L_B−1)), halves rounded up."""
    if source_layers < 1 or target_layers < 1:
        raise ValueError(f"layer counts must be positive, got {source_layers} and {target_layers}")
    if target_layers == 1:
        return [source_layers - 1]
    return [math.floor(j * (source_layers - 1) / (target_layers - 1) + 0.5) for j in range(target_layers)]


@dataclass(frozen=True)
class TaskVector:
    """Dense per-module updates ΔW (d_out × d_in, float32) of one model family."""

    model_type: str
    deltas: dict[Key, torch.Tensor]
    rank: int

    @property
    def roles(self) -> list[str]:
        return [r for r in ROLES if any(role == r for _, role in self.deltas)]

    def scaled(self, factor: float) -> TaskVector:
        return TaskVector(self.model_type, {k: v * factor for k, v in self.deltas.items()}, self.rank)

    def module_deltas(self) -> dict[str, torch.Tensor]:
        """The same updates keyed by module path."""
        return {module_name(self.model_type, i, r): d for (i, r), d in self.deltas.items()}


def load_lora_task_vector(adapter_dir: Path, model_type: str) -> TaskVector:
    """Read a peft LoRA adapter folder and return its dense task vector ΔW = scale·B·A."""
    factors = read_lora_factors(adapter_dir)
    deltas = {parse_module(model_type, module): f.dense() for module, f in factors.items()}
    return TaskVector(model_type, deltas, max(f.rank for f in factors.values()))


def linear_modules(model: torch.nn.Module, model_type: str, keys: list[Key]) -> dict[Key, torch.nn.Linear]:
    """The nn.Linear of each (layer, role) in ``model``; UnsupportedPair if one is missing."""
    named = dict(model.named_modules())
    out: dict[Key, torch.nn.Linear] = {}
    for layer, role in keys:
        name = module_name(model_type, layer, role)
        module = named.get(name)
        if not isinstance(module, torch.nn.Linear):
            raise UnsupportedPair(f"{model_type!r} model has no linear layer {name!r}")
        out[(layer, role)] = module
    return out


def check_task_vector(tv: TaskVector, model: torch.nn.Module) -> None:
    """Refuse a task vector whose shapes do not match ``model``'s linear layers."""
    modules = linear_modules(model, tv.model_type, list(tv.deltas))
    for key, delta in tv.deltas.items():
        shape = tuple(modules[key].weight.shape)
        if tuple(delta.shape) != shape:
            name = module_name(tv.model_type, *key)
            raise InvalidPackage(f"adapter update of {name} has shape {tuple(delta.shape)}, base has {shape}")


@contextmanager
def merged_deltas(
    model: torch.nn.Module, model_type: str, deltas: Mapping[Key, torch.Tensor]
) -> Iterator[None]:
    """Add ΔW to ``model``'s weights for the duration of the block, then restore them exactly."""
    modules = linear_modules(model, model_type, list(deltas))
    originals = {key: module.weight.detach().clone() for key, module in modules.items()}
    try:
        with torch.no_grad():
            for key, module in modules.items():
                module.weight.add_(deltas[key].to(module.weight))
        yield
    finally:
        with torch.no_grad():
            for key, module in modules.items():
                module.weight.copy_(originals[key])
