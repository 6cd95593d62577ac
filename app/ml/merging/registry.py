"""Merge methods by name, each declaring its parameters as data (mergekit-style).

`METHODS` is the one list the API schema (`params_json_schema`), the CLI help (`method_help`)
and the docs (`methods_markdown`) are generated from. Every method also takes PACT's
parameters (`PACT_PARAMS`): PACT is a filter composable with any method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from app.ml.adapters import LoraDelta
from app.ml.errors import InvalidInput
from app.ml.merging.lowrank import (
    lowrank_iso_c,
    lowrank_iso_cts,
    lowrank_task_arithmetic,
    lowrank_tsv_m,
)
from app.ml.merging.methods import (
    Combine,
    mean_task_vector,
    merge_dare,
    merge_iso_c,
    merge_iso_cts,
    merge_task_arithmetic,
    merge_ties,
    merge_tsv_m,
)
from app.ml.merging.pact import PactConfig, pact_filter
from app.ml.params import ParamSpec, ResolvedParams, resolve

TensorMerge = Callable[[str, Sequence[Tensor], ResolvedParams], Tensor]
"""(tensor name, τ_1..τ_T, params) → merged delta δ in float32."""

LowRankMerge = Callable[[str, Sequence[LoraDelta | None], ResolvedParams], LoraDelta]
"""(weight name, one LoRA update or None per learnware, params) → merged update as factors."""

PACT_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("pact", "bool", False, "filter every task vector with PACT before merging"),
    ParamSpec(
        "pact_anchor_rank",
        "float",
        0.05,
        "PACT K: anchored singular directions of the pretrained weight, as a fraction of min(m, n)",
        low=0.0,
        high=1.0,
        low_inclusive=False,
    ),
    ParamSpec(
        "pact_task_rank",
        "float",
        0.05,
        "PACT k: a task's active singular directions, as a fraction of min(m, n), capped at its rank",
        low=0.0,
        high=1.0,
        low_inclusive=False,
    ),
    ParamSpec(
        "pact_side",
        "choice",
        "right",
        "PACT filters the input side (right singular vectors) or the output side (left)",
        choices=("right", "left"),
    ),
    ParamSpec(
        "pact_layers",
        "str",
        "",
        "regex searched in tensor names: PACT filters the 2-D tensors that match (empty: all of them)",
    ),
    ParamSpec(
        "pact_svd",
        "choice",
        "randomized",
        "PACT's SVDs: randomized (torch.svd_lowrank) or exact",
        choices=("randomized", "exact"),
    ),
    ParamSpec("pact_seed", "int", 0, "seed of PACT's randomized SVD", low=0, high=2**31 - 1),
)


def _lam(default: float) -> ParamSpec:
    return ParamSpec("lam", "float", default, "λ: scale of the merged task vector", low=-10.0, high=10.0)


def _alpha(default: float) -> ParamSpec:
    return ParamSpec("alpha", "float", default, "α: scale of the merged task vector", low=0.0, high=10.0)


def _top_k(default: float) -> ParamSpec:
    return ParamSpec(
        "k",
        "float",
        default,
        "TIES: fraction of each task vector's entries kept, largest magnitudes first, per tensor",
        low=0.0,
        high=1.0,
        low_inclusive=False,
    )


@dataclass(frozen=True)
class MergeMethod:
    """A merge method: its name, a one-line summary, its parameters and its implementations."""

    name: str
    summary: str
    params: tuple[ParamSpec, ...]
    merge: TensorMerge
    elementwise: bool
    """True: applied to every floating tensor. False: 2-D tensors only; the rest get mean(τ)."""
    lowrank: LowRankMerge | None = None
    """Factor-space implementation for LoRA learnwares; None: the LoRA path densifies per weight."""

    @property
    def all_params(self) -> tuple[ParamSpec, ...]:
        """The method's own parameters followed by PACT's."""
        return self.params + PACT_PARAMS

    def resolve(self, params: Mapping[str, object] | None) -> ResolvedParams:
        """Validate `params`, fill defaults, reject unknown names."""
        return resolve(self.name, self.all_params, params)

    def json_schema(self) -> dict[str, object]:
        """The method's parameters as a JSON Schema object (for the API)."""
        return {
            "title": self.name,
            "description": self.summary,
            "type": "object",
            "additionalProperties": False,
            "properties": {spec.name: spec.json_schema() for spec in self.all_params},
        }

    def help_text(self) -> str:
        """The method's parameters as CLI help lines."""
        lines = [f"{self.name}: {self.summary}"]
        for spec in self.all_params:
            lines.append(
                f"  {spec.name} ({spec.kind}, default {spec.default!r}, {spec.range_text()}): {spec.help}"
            )
        return "\n".join(lines)


def _task_arithmetic(name: str, taus: Sequence[Tensor], params: ResolvedParams) -> Tensor:
    return merge_task_arithmetic(taus, params.get_float("lam"), name)


def _ties(name: str, taus: Sequence[Tensor], params: ResolvedParams) -> Tensor:
    return merge_ties(taus, params.get_float("k"), params.get_float("lam"), name)


def _dare(name: str, taus: Sequence[Tensor], params: ResolvedParams) -> Tensor:
    return merge_dare(
        taus,
        p=params.get_float("p"),
        lam=params.get_float("lam"),
        seed=params.get_int("seed"),
        combine=cast(Combine, params.get_str("combine")),
        k=params.get_float("k"),
        name=name,
    )


def _tsv_m(name: str, taus: Sequence[Tensor], params: ResolvedParams) -> Tensor:
    return merge_tsv_m(taus, params.get_float("alpha"), name)


def _iso_c(name: str, taus: Sequence[Tensor], params: ResolvedParams) -> Tensor:
    return merge_iso_c(taus, params.get_float("alpha"), name)


def _iso_cts(name: str, taus: Sequence[Tensor], params: ResolvedParams) -> Tensor:
    return merge_iso_cts(taus, params.get_float("common_fraction"), params.get_float("alpha"), name)


def _lowrank_task_arithmetic(
    name: str, deltas: Sequence[LoraDelta | None], params: ResolvedParams
) -> LoraDelta:
    return lowrank_task_arithmetic(deltas, params.get_float("lam"), name)


def _lowrank_tsv_m(name: str, deltas: Sequence[LoraDelta | None], params: ResolvedParams) -> LoraDelta:
    return lowrank_tsv_m(deltas, params.get_float("alpha"), name)


def _lowrank_iso_c(name: str, deltas: Sequence[LoraDelta | None], params: ResolvedParams) -> LoraDelta:
    return lowrank_iso_c(deltas, params.get_float("alpha"), name)


def _lowrank_iso_cts(name: str, deltas: Sequence[LoraDelta | None], params: ResolvedParams) -> LoraDelta:
    return lowrank_iso_cts(deltas, params.get_float("common_fraction"), params.get_float("alpha"), name)


METHODS: dict[str, MergeMethod] = {
    method.name: method
    for method in (
        MergeMethod(
            "task_arithmetic",
            "θ0 + λ·Σ_t τ_t",
            (_lam(0.5),),
            _task_arithmetic,
            elementwise=True,
            lowrank=_lowrank_task_arithmetic,
        ),
        MergeMethod(
            "ties",
            "trim each τ_t to its top-k entries per tensor, elect a sign per entry, disjoint mean, times λ",
            (_top_k(0.2), _lam(1.0)),
            _ties,
            elementwise=True,
        ),
        MergeMethod(
            "dare",
            "drop entries of each τ_t with probability p, rescale by 1/(1-p), then Task Arithmetic or TIES",
            (
                ParamSpec(
                    "p",
                    "float",
                    0.5,
                    "probability of dropping each entry",
                    low=0.0,
                    high=1.0,
                    high_inclusive=False,
                ),
                ParamSpec(
                    "combine",
                    "choice",
                    "task_arithmetic",
                    "how the dropped task vectors are merged",
                    choices=("task_arithmetic", "ties"),
                ),
                _lam(0.5),
                _top_k(0.2),
                ParamSpec(
                    "seed",
                    "int",
                    0,
                    "seed of the drop masks (mixed with each tensor's name)",
                    low=0,
                    high=2**31 - 1,
                ),
            ),
            _dare,
            elementwise=True,
        ),
        MergeMethod(
            "tsv_m",
            "top ⌊min(m,n)/T⌋ singular triplets per task, U and V polar-orthogonalised, times α",
            (_alpha(1.0),),
            _tsv_m,
            elementwise=False,
            lowrank=_lowrank_tsv_m,
        ),
        MergeMethod(
            "iso_c",
            "SVD of Σ_t τ_t with every singular value replaced by their mean, times α",
            (_alpha(1.0),),
            _iso_c,
            elementwise=False,
            lowrank=_lowrank_iso_c,
        ),
        MergeMethod(
            "iso_cts",
            "Iso-C over the top common directions of Σ_t τ_t plus each task's top residual directions",
            (
                ParamSpec(
                    "common_fraction",
                    "float",
                    0.8,
                    "fraction of the rank given to the common subspace",
                    low=0.0,
                    high=1.0,
                    low_inclusive=False,
                ),
                _alpha(1.0),
            ),
            _iso_cts,
            elementwise=False,
            lowrank=_lowrank_iso_cts,
        ),
    )
}


def get_method(name: str) -> MergeMethod:
    """The merge method called `name`; the error lists the known ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise InvalidInput(f"unknown merge method {name!r}; known: {', '.join(METHODS)}") from None


def params_json_schema(name: str) -> dict[str, object]:
    """JSON Schema of the parameters of the method `name`."""
    return get_method(name).json_schema()


def method_help(name: str) -> str:
    """CLI help text of the method `name`."""
    return get_method(name).help_text()


def methods_markdown() -> str:
    """Markdown reference of every method and its parameters."""
    out = ["# Merge methods", ""]
    for method in METHODS.values():
        out += [
            f"## `{method.name}`",
            "",
            method.summary,
            "",
            "| parameter | type | default | range | meaning |",
        ]
        out.append("|---|---|---|---|---|")
        for spec in method.params:
            out.append(
                f"| `{spec.name}` | {spec.kind} | `{spec.default!r}` | {spec.range_text()} | {spec.help} |"
            )
        out.append("")
    out += [
        "## PACT (every method)",
        "",
        "| parameter | type | default | range | meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in PACT_PARAMS:
        out.append(
            f"| `{spec.name}` | {spec.kind} | `{spec.default!r}` | {spec.range_text()} | {spec.help} |"
        )
    return "\n".join(out) + "\n"


def merge_delta(
    name: str, base: Tensor, taus: Sequence[Tensor], method: MergeMethod, params: ResolvedParams
) -> Tensor:
    """The merged delta δ (float32) of one tensor: PACT if enabled and it covers the tensor, then the
    method on 2-D tensors (or every tensor for elementwise methods), mean(τ) for the rest.

    `taus` must have the base's shape (the callers check); it may be lazy (see `methods.py`).
    """
    pact = PactConfig.from_params(params)
    if pact is not None and pact.covers(name, base.shape):
        taus = pact_filter(name, base, taus, pact)
    if method.elementwise or base.dim() == 2:
        return method.merge(name, taus, params)
    return mean_task_vector(taus, name)


def merge_tensor(
    name: str,
    base: Tensor,
    finetuned: Sequence[Tensor],
    method: str,
    params: Mapping[str, object] | None = None,
) -> Tensor:
    """Merge one tensor: θ0 + δ(θ_1 − θ0, …, θ_T − θ0), in the base's dtype."""
    spec = get_method(method)
    resolved = spec.resolve(params)
    base32 = base.to(torch.float32)
    for index, weight in enumerate(finetuned):
        if weight.shape != base.shape:
            raise InvalidInput(
                f"{name}: fine-tuned model {index} has shape {tuple(weight.shape)} but the base has {tuple(base.shape)}"
            )
    taus = [weight.to(torch.float32) - base32 for weight in finetuned]
    return (base32 + merge_delta(name, base, taus, spec, resolved)).to(base.dtype)
