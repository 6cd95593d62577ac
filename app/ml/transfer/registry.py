"""The transfer methods, keyed by name, each declaring its output and its parameters (``ParamSpec``,
shared with the merge methods), so the CLI, the API and the docs read the same list."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.ml.errors import InvalidInput
from app.ml.params import ParamSpec, resolve

OutputKind = Literal["adapter", "operator"]


@dataclass(frozen=True)
class TransferMethod:
    """A registered transfer method: its output kind, whether it uses labels, its parameters."""

    name: str
    summary: str
    output: OutputKind
    uses_labels: bool
    params: tuple[ParamSpec, ...]

    def resolve_params(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults overridden by ``given``; unknown names and bad values are refused by name."""
        return dict(resolve(self.name, self.params, given))


_COMMON = (
    ParamSpec("max_tokens", "int", 128, "tokens per calibration text"),
    ParamSpec("batch_size", "int", 16, "calibration texts per forward pass"),
    ParamSpec("temperature", "float", 0.05, "temperature T of the label-name head"),
)
_ADAPTER = (
    ParamSpec("alpha", "float", 1.0, "scale of the transferred update: θ_B' = θ_B + α·τ_B"),
    ParamSpec(
        "rank",
        "int",
        0,
        "LoRA rank of the saved adapter (0: exact, the source rank times the layers folded into one)",
    ),
    ParamSpec(
        "layers",
        "choice",
        "nearest",
        "a shallower target: each target layer takes its nearest source layer, or all source "
        "layers folded into their nearest target layer (summed)",
        choices=("nearest", "all"),
    ),
    ParamSpec(
        "alignment",
        "choice",
        "word",
        "calibration rows: words matched across tokenizers, or one pooled row per text",
        choices=("word", "pooled"),
    ),
    *_COMMON,
)

METHODS: dict[str, TransferMethod] = {
    "bico": TransferMethod(
        "bico",
        "BiCo: R_in from input activations, R_out from output gradients (one forward+backward pass)",
        "adapter",
        True,
        _ADAPTER,
    ),
    "theseus": TransferMethod(
        "theseus",
        "THESEUS-style: R_in from input activations, R_out from output activations (no backward)",
        "adapter",
        False,
        _ADAPTER,
    ),
    "input_only": TransferMethod(
        "input_only",
        "R_in from input activations; output side padded or truncated",
        "adapter",
        False,
        _ADAPTER,
    ),
    "output_only": TransferMethod(
        "output_only",
        "R_out from output gradients; input side padded or truncated",
        "adapter",
        True,
        _ADAPTER,
    ),
    "naive": TransferMethod(
        "naive", "pad or truncate the update on both sides (no calibration)", "adapter", False, _ADAPTER
    ),
    "utd": TransferMethod(
        "utd",
        "UTD closed form: a post-pooling operator on the target that reproduces the task descriptor",
        "operator",
        False,
        (
            ParamSpec(
                "alpha", "float", 0.5, "strength α of emb ← (I + α Xᵀ)·emb (negative removes the task)"
            ),
            ParamSpec("mu_f_rel", "float", 1e-2, "μ_F as a multiple of mean(s²) of the probe features"),
            ParamSpec("mu_g_rel", "float", 1e-6, "μ_G as a multiple of mean(t²) of the prompt features"),
            *_COMMON,
        ),
    ),
}


def get_method(name: str) -> TransferMethod:
    try:
        return METHODS[name]
    except KeyError:
        raise InvalidInput(f"unknown transfer method {name!r}; known: {', '.join(METHODS)}") from None
