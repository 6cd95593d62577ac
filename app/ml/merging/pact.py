"""PACT: protect the anchored core, a filter in front of any merge method.

For a weight matrix W0 (m×n) and task vectors τ_t of the same shape:
V_0K = top-K singular vectors of W0; V_t,k = top-k singular vectors of τ_t;
V_t,LBW = orth((I − V_t,k V_t,kᵀ) V_0K), the anchored directions task t did not move;
P_t = orth([V_j,LBW for j ≠ t]), the shield; τ̃_t = τ_t − τ_t P_t P_tᵀ (right side) or
τ̃_t = τ_t − P_t P_tᵀ τ_t (left side). The merge method then runs on the τ̃_t.

K and k are fractions of min(m, n); k is further capped at τ_t's numerical rank, so a LoRA
update of rank r never contributes null-space vectors. The shield has up to (T−1)·K columns:
keep K·(T−1) well below the filtered side's dimension, or the filter removes almost everything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import Tensor

from app.ml.errors import InvalidInput
from app.ml.merging.linalg import gram_orientation, remove_column_space, remove_row_space, svd_top
from app.ml.merging.methods import RANK_RTOL, MappedTaskVectors, numerical_rank, tensor_seed
from app.ml.params import ResolvedParams

Side = Literal["right", "left"]
SvdMode = Literal["exact", "randomized"]

ORTH_TOL = 1e-6
"""Columns whose singular value falls below this are dropped by `orthonormal_basis` (inputs are unit-scale)."""

RANDOMIZED_OVERSAMPLE = 8
RANDOMIZED_ITERATIONS = 4


@dataclass(frozen=True)
class PactConfig:
    """PACT's settings, read from a method's resolved parameters."""

    anchor_fraction: float
    task_fraction: float
    side: Side
    svd: SvdMode
    layers: str
    seed: int

    @classmethod
    def from_params(cls, params: ResolvedParams) -> PactConfig | None:
        """The config when `pact=True` in `params`, else None."""
        if not params.get_bool("pact"):
            return None
        layers = params.get_str("pact_layers")
        try:
            re.compile(layers)
        except re.error as error:
            raise InvalidInput(
                f"{params.method}: pact_layers={layers!r} is not a valid regex: {error}"
            ) from None
        return cls(
            anchor_fraction=params.get_float("pact_anchor_rank"),
            task_fraction=params.get_float("pact_task_rank"),
            side=cast(Side, params.get_str("pact_side")),
            svd=cast(SvdMode, params.get_str("pact_svd")),
            layers=layers,
            seed=params.get_int("pact_seed"),
        )

    def covers(self, name: str, shape: torch.Size) -> bool:
        """Whether PACT filters the tensor `name`: 2-D and matching the layer regex."""
        return len(shape) == 2 and re.search(self.layers, name) is not None

    def anchor_rank(self, shape: torch.Size) -> int:
        """K for a matrix of this shape."""
        return max(1, round(self.anchor_fraction * min(shape)))

    def task_rank(self, shape: torch.Size) -> int:
        """k (before the cap at τ_t's numerical rank) for a matrix of this shape."""
        return max(1, round(self.task_fraction * min(shape)))


def orthonormal_basis(matrix: Tensor, tol: float = ORTH_TOL) -> Tensor:
    """An orthonormal basis (columns) of the column space of `matrix`, dropping directions below `tol`."""
    if matrix.shape[1] == 0:
        return matrix.to(torch.float64)
    left, values, _ = torch.linalg.svd(matrix.to(torch.float64), full_matrices=False)
    return left[:, : numerical_rank(values, tol)]


def top_singular_subspace(
    matrix: Tensor, k: int, side: Side, svd: SvdMode, seed: int, rtol: float = RANK_RTOL
) -> Tensor:
    """Orthonormal columns spanning the top-k right (or left) singular vectors of `matrix`, in float64,
    capped at its numerical rank. `svd="randomized"` uses `torch.svd_lowrank`, seeded by `seed`,
    except for tall and wide matrices, whose exact Gram-path SVD costs no more and copies nothing."""
    if gram_orientation(matrix.shape) is not None:
        left, _, right = svd_top(matrix, k, rtol=rtol)
        return (left if side == "left" else right).to(torch.float64)
    oriented = matrix.to(torch.float64)
    if side == "left":
        oriented = oriented.T
    if svd == "exact":
        _, values, right_h = torch.linalg.svd(oriented, full_matrices=False)
        vectors = right_h.T
    else:
        q = min(k + RANDOMIZED_OVERSAMPLE, *oriented.shape)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            _, values, vectors = torch.svd_lowrank(oriented, q=q, niter=RANDOMIZED_ITERATIONS)
    if values.numel() == 0 or values[0].item() == 0.0:
        return vectors[:, :0]
    keep = min(k, numerical_rank(values, rtol * values[0].item()))
    return vectors[:, :keep].clone()


def anchor_subspace(name: str, base_weight: Tensor, config: PactConfig) -> Tensor:
    """V_0K: the top-K singular vectors of the pretrained weight on the configured side."""
    return top_singular_subspace(
        base_weight,
        config.anchor_rank(base_weight.shape),
        config.side,
        config.svd,
        tensor_seed(config.seed, name),
    )


def shields(anchor: Tensor, task_subspaces: Sequence[Tensor]) -> list[Tensor]:
    """P_t for every task: the orthonormal span of the other tasks' load-bearing-wall subspaces."""
    walls = [orthonormal_basis(anchor - subspace @ (subspace.T @ anchor)) for subspace in task_subspaces]
    return [
        orthonormal_basis(
            torch.cat([wall for j, wall in enumerate(walls) if j != t] or [anchor[:, :0]], dim=1)
        )
        for t in range(len(walls))
    ]


def apply_shield(tau: Tensor, shield: Tensor, side: Side) -> Tensor:
    """τ − τ·P·Pᵀ (right) or τ − P·Pᵀ·τ (left), in τ's dtype."""
    if gram_orientation(tau.shape) is not None:
        return remove_row_space(tau, shield) if side == "right" else remove_column_space(tau, shield)
    tau64 = tau.to(torch.float64)
    filtered = tau64 - ((tau64 @ shield) @ shield.T if side == "right" else shield @ (shield.T @ tau64))
    return filtered.to(tau.dtype)


def pact_shields(name: str, base_weight: Tensor, taus: Sequence[Tensor], config: PactConfig) -> list[Tensor]:
    """The shield P_t of every task for one dense weight matrix (one pass over the task vectors)."""
    k = config.task_rank(base_weight.shape)
    subspaces = []
    for t in range(len(taus)):
        tau = taus[t]
        if tau.shape != base_weight.shape:
            raise InvalidInput(
                f"{name}: task vector {t} has shape {tuple(tau.shape)} but the base weight has "
                f"{tuple(base_weight.shape)}"
            )
        subspaces.append(
            top_singular_subspace(tau, k, config.side, config.svd, tensor_seed(config.seed, f"{name}#{t}"))
        )
    return shields(anchor_subspace(name, base_weight, config), subspaces)


def pact_filter(
    name: str, base_weight: Tensor, taus: Sequence[Tensor], config: PactConfig
) -> Sequence[Tensor]:
    """τ̃_t = τ_t with the other tasks' load-bearing-wall subspaces projected out, for one weight matrix.

    The result is lazy: τ̃_t is computed from `taus[t]` when read, so no filtered copies are held.
    """
    task_shields = pact_shields(name, base_weight, taus, config)
    return MappedTaskVectors(
        taus, lambda t, tau: apply_shield(tau.to(torch.float32), task_shields[t], config.side)
    )
