"""Spec spaces: everything that makes two PAVE vectors comparable, hashed into one id.

A space fixes the base (by the sha256 of its weights), the LoRA placement and rank, the
shared frozen A matrices (from a seed and each layer's name), the label-name head and the
fitting recipe. Vectors of different spaces are never compared.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from app.ml.encoders import Encoder, load_encoder, lora_targets
from app.ml.errors import IncompatibleSpec, InvalidInput
from app.ml.head import LabelNameHead

HEADS = ("label-names", "prototypes")


@dataclass(frozen=True)
class FitRecipe:
    """How B is fitted. ``steps=0`` is the class-balanced one-gradient spec (see ``pave``)."""

    steps: int = 0
    lr: float = 5e-3
    batch_size: int = 16
    weight_decay: float = 0.0
    max_tokens: int = 128
    seed: int = 0
    balanced: bool = True
    """Weight examples by 1/(count of their target class); for steps=0 also use (u − y) and sign."""
    head: str = "label-names"
    """The class vectors the spec is fitted through: ``label-names`` (the frozen embeddings of the
    class names) or ``prototypes`` (the mean frozen-base embedding of each class's examples under
    the targets, so the spec does not depend on what the classes are called, nor on their order).
    Prototypes raise the benchmark's worst kind of user task (renamed labels) but, invariant to
    any permutation of the classes, give an inverted classifier (flipped labels) the spec of the
    good one, which a spec-only user then cannot tell apart (docs/benchmarks/identification.md):
    a space opts in with ``{"recipe": {"head": "prototypes"}}``."""

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise InvalidInput(f"steps must be >= 0, got {self.steps}")
        if self.head not in HEADS:
            raise InvalidInput(f"head must be one of {HEADS}, got {self.head!r}")
        if self.batch_size < 1 or self.max_tokens < 8:
            raise InvalidInput(f"bad batch_size {self.batch_size} or max_tokens {self.max_tokens}")


@dataclass(frozen=True)
class SpecSpaceConfig:
    """The declarative definition of a spec space."""

    base: str = "all-MiniLM-L6-v2"
    rank: int = 8
    alpha: float = 8.0
    target_modules: tuple[str, ...] | None = None
    """LoRA targets; None means the architecture's default (BERT: query, value; MPNet: q, v)."""
    a_seed: int = 0
    a_scale: float = 1.0
    """s in E[A Aᵀ] = s·I; entries of A are U(−a, a) with a = √(3s/n)."""
    temperature: float = 0.05
    recipe: FitRecipe = field(default_factory=FitRecipe)

    def with_recipe(self, **changes: Any) -> SpecSpaceConfig:
        return replace(self, recipe=replace(self.recipe, **changes))


def _seed_for(seed: int, layer: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{layer}".encode()).digest()[:8], "little") & (2**63 - 1)


def shared_lora_a(layer: str, rank: int, in_features: int, seed: int, scale: float) -> torch.Tensor:
    """The frozen A of one layer: U(−a, a), a = √(3s/n), from the space seed and the layer name."""
    gen = torch.Generator().manual_seed(_seed_for(seed, layer))
    bound = math.sqrt(3.0 * scale / in_features)
    return (torch.rand(rank, in_features, generator=gen, dtype=torch.float64) * 2 - 1).mul(bound).float()


class SpecSpace:
    """A loaded spec space: the base wrapped with LoRA (A shared and frozen, B trainable)."""

    def __init__(self, config: SpecSpaceConfig, encoder: Encoder):
        self.config = config
        self.encoder = encoder
        self.targets = config.target_modules or lora_targets(encoder.model_type)
        lora = LoraConfig(
            r=config.rank,
            lora_alpha=config.alpha,  # type: ignore[arg-type]  # peft accepts floats
            target_modules=list(self.targets),
            lora_dropout=0.0,
            bias="none",
            init_lora_weights=True,
        )
        self.model: PeftModel = get_peft_model(encoder.model, lora)
        self.model.eval()
        self.layers: list[str] = []
        self._b: list[torch.nn.Parameter] = []
        prefix = "base_model.model."
        for name, module in self.model.named_modules():
            lora_a = getattr(module, "lora_A", None)
            if not isinstance(lora_a, torch.nn.ModuleDict) or "default" not in lora_a:
                continue
            layer = name.removeprefix(prefix)
            lora_b = module.lora_B
            assert isinstance(lora_b, torch.nn.ModuleDict)
            weight_a, weight_b = lora_a["default"].weight, lora_b["default"].weight
            assert isinstance(weight_a, torch.nn.Parameter) and isinstance(weight_b, torch.nn.Parameter)
            weight_a.data.copy_(
                shared_lora_a(layer, config.rank, int(weight_a.shape[1]), config.a_seed, config.a_scale)
            )
            weight_a.requires_grad_(False)
            weight_b.requires_grad_(True)
            self.layers.append(layer)
            self._b.append(weight_b)
        if not self.layers:
            raise InvalidInput(f"no LoRA targets {self.targets} found in base {encoder.path}")
        self.dim = sum(b.numel() for b in self._b)
        self.id = space_id(config, encoder.sha256)
        self._heads: dict[tuple[str, ...], LabelNameHead] = {}
        self._freeze_a()
        self.lock = threading.Lock()
        """Fitting mutates B: one fit at a time per loaded space."""
        self.reset()

    @property
    def b_params(self) -> list[torch.nn.Parameter]:
        return self._b

    @property
    def layer_shapes(self) -> list[tuple[int, int]]:
        return [(int(b.shape[0]), int(b.shape[1])) for b in self._b]

    def reset(self) -> None:
        """B = 0: the model is the frozen base again."""
        with torch.no_grad():
            for b in self._b:
                b.zero_()
                b.grad = None

    def spec_vector(self, *, from_grad: bool = False) -> np.ndarray:
        """Concatenate vec(B_l) (or their gradients) in the space's layer order, as float32."""
        parts = []
        for b in self._b:
            t = b.grad if from_grad else b.data
            if t is None:
                raise RuntimeError("no gradient accumulated on B")
            parts.append(t.detach().float().reshape(-1).cpu())
        return torch.cat(parts).numpy().astype(np.float32)

    def head(self, label_names: tuple[str, ...] | list[str]) -> LabelNameHead:
        """The label-name head for ``label_names``, embedded once with the frozen base."""
        key = tuple(label_names)
        if key not in self._heads:
            with self.model.disable_adapter():
                self._heads[key] = LabelNameHead.from_names(
                    self.encoder, key, self.config.temperature, max_tokens=32
                )
            self._freeze_a()  # peft marks every adapter weight trainable again on exit
        return self._heads[key]

    def name_similarity(self, rows: Sequence[str], columns: Sequence[str]) -> np.ndarray:
        """Cosine of two label sets' embeddings by the frozen base (``rows`` × ``columns``): what
        label maps by meaning, and the names' reading of a map, are decided on."""
        with self.lock:
            left = self.head(tuple(rows)).embeddings
            right = self.head(tuple(columns)).embeddings
        return (left @ right.T).numpy().astype(np.float64)

    def _freeze_a(self) -> None:
        for name, param in self.model.named_parameters():
            param.requires_grad_("lora_B" in name)

    def describe(self) -> dict[str, Any]:
        """All a client needs to compute a compatible spec locally (and check it matches)."""
        return {
            "id": self.id,
            "config": config_dict(self.config),
            "base_sha256": self.encoder.sha256,
            "base_model_type": self.encoder.model_type,
            "base_parameters": self.encoder.num_parameters(),
            "target_modules": list(self.targets),
            "layers": self.layers,
            "layer_shapes": self.layer_shapes,
            "dim": self.dim,
        }


def config_dict(config: SpecSpaceConfig) -> dict[str, Any]:
    data = asdict(config)
    data["target_modules"] = list(config.target_modules) if config.target_modules else None
    return data


def config_from_dict(data: dict[str, Any]) -> SpecSpaceConfig:
    data = dict(data)
    recipe = FitRecipe(**data.pop("recipe", {}))
    targets = data.pop("target_modules", None)
    return SpecSpaceConfig(**data, target_modules=tuple(targets) if targets else None, recipe=recipe)


def space_id(config: SpecSpaceConfig, base_sha256: str) -> str:
    """sha256 of the canonical space definition, the base's weight hash included."""
    payload = config_dict(config)
    payload["base"] = None  # the alias is a name; the weights' hash is the identity
    payload["base_sha256"] = base_sha256
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return "pave-" + hashlib.sha256(blob).hexdigest()[:24]


_spaces_lock = threading.Lock()


def load_space(config: SpecSpaceConfig | None = None) -> SpecSpace:
    """Load (once per process) the spec space of ``config``; the default space if None."""
    with _spaces_lock:
        return _load_space(config or SpecSpaceConfig())


@lru_cache(maxsize=4)
def _load_space(config: SpecSpaceConfig) -> SpecSpace:
    return SpecSpace(config, load_encoder(config.base, fresh=True))


class SpaceShape(Protocol):
    """What checking a spec needs of its space: a loaded ``SpecSpace`` or a registered record."""

    @property
    def id(self) -> str: ...

    @property
    def dim(self) -> int: ...


def check_vector(vector: np.ndarray, space: SpaceShape, space_id_of_vector: str | None = None) -> np.ndarray:
    """Refuse a spec of another space, of the wrong shape, or with non-finite or zero values."""
    if space_id_of_vector is not None and space_id_of_vector != space.id:
        raise IncompatibleSpec(f"spec is of space {space_id_of_vector}, not {space.id}")
    arr = np.asarray(vector)
    if arr.ndim != 1 or arr.shape[0] != space.dim:
        raise IncompatibleSpec(f"spec has shape {tuple(arr.shape)}, space {space.id} needs ({space.dim},)")
    if not np.all(np.isfinite(arr)):
        raise IncompatibleSpec("spec has NaN or infinite values")
    if not np.any(arr):
        raise IncompatibleSpec("spec is all zeros")
    return arr.astype(np.float32, copy=False)
