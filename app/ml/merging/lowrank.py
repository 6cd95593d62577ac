"""The low-rank fast path for LoRA learnwares, where every task vector is τ_t = s_t·B_t·A_t.

Σ_t s_t B_t A_t = [s_1B_1 … s_TB_T]·[A_1; …; A_T]. A QR of the stacked A and an eigendecomposition
of a small (Σr × Σr) Gram matrix give the exact SVD of the sum in O((m+n)(Σr)²) instead of
O(mn·min(m,n)) (`factor_svd`).
Task Arithmetic, TSV-M, Iso-C, Iso-CTS and PACT's subspaces all run on factors and return the
merged update as factors again (rank ≤ Σr). The results equal the dense methods in `methods.py`
and `pact.py` up to rounding.

Each function takes one entry per learnware, `None` where a learnware does not touch the weight
(its τ is zero), so T counts every learnware in the merge, as on the dense path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from app.ml.adapters import LoraDelta
from app.ml.errors import InvalidInput
from app.ml.merging.linalg import gram_spectrum
from app.ml.merging.methods import RANK_RTOL, numerical_rank, polar_factor
from app.ml.merging.pact import PactConfig, anchor_subspace, shields


def factor_svd(
    deltas: Sequence[LoraDelta], rtol: float = RANK_RTOL, tol: float | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Exact SVD (U: m×ρ, S: ρ, V: n×ρ, float64) of Σ_t scale_t·B_t·A_t, cut at its numerical rank ρ.

    With the stacked factors B (m×R) and A (R×n): QR of Aᵀ = Q·R_A gives the sum as C·Qᵀ with
    C = B·R_Aᵀ (m×R); eigh of the small Gram matrix CᵀC = W·Σ²·Wᵀ then gives U = C·W·Σ⁻¹ and
    V = Q·W. One QR and one R×R eigh instead of two QRs and an SVD: the same triplets to float64
    rounding above the cut (which sits far above √ε·σ_max, where the Gram matrix stops resolving σ).
    Singular values at or below `tol` (default `rtol`·σ_max) are dropped.
    """
    stacked_b = torch.cat([delta.scale * delta.B.to(torch.float64) for delta in deltas], dim=1)
    stacked_a = torch.cat([delta.A.to(torch.float64) for delta in deltas], dim=0)
    q_a, r_a = torch.linalg.qr(stacked_a.T)
    core = stacked_b @ r_a.T
    values, vectors = gram_spectrum(core)
    if values.numel() == 0 or values[0].item() == 0.0:
        rank = 0
    else:
        rank = numerical_rank(values, rtol * values[0].item() if tol is None else tol)
    kept = vectors[:, :rank]
    values = values[:rank]
    return (core @ kept) / values, values, q_a @ kept


def _present(deltas: Sequence[LoraDelta | None], name: str) -> list[LoraDelta]:
    present = [delta for delta in deltas if delta is not None]
    if not present:
        raise InvalidInput(f"{name}: no learnware has a LoRA update for this weight")
    shape = present[0].shape
    for index, delta in enumerate(deltas):
        if delta is not None and delta.shape != shape:
            raise InvalidInput(
                f"{name}: learnware {index} has a {delta.shape[0]}×{delta.shape[1]} update "
                f"but another has {shape[0]}×{shape[1]}"
            )
    return present


def _from_subspaces(left: Tensor, values: Tensor, right: Tensor, scale: float) -> LoraDelta:
    """scale·U⊥·diag(S)·V⊥ᵀ as factors, with U⊥, V⊥ the polar factors of U and V."""
    return LoraDelta(
        B=(scale * polar_factor(left) * values).to(torch.float32), A=polar_factor(right).T.to(torch.float32)
    )


def lowrank_task_arithmetic(
    deltas: Sequence[LoraDelta | None], lam: float, name: str = "weight"
) -> LoraDelta:
    """Task Arithmetic on factors: λ·Σ_t τ_t = [λs_1B_1 … λs_TB_T]·[A_1; …; A_T] (rank Σr, exact)."""
    present = _present(deltas, name)
    return LoraDelta(
        B=torch.cat([lam * delta.scale * delta.B.to(torch.float32) for delta in present], dim=1),
        A=torch.cat([delta.A.to(torch.float32) for delta in present], dim=0),
    )


def lowrank_iso_c(
    deltas: Sequence[LoraDelta | None], alpha: float, name: str = "weight", rtol: float = RANK_RTOL
) -> LoraDelta:
    """Iso-C on factors: α·mean(Σ)·U·Vᵀ from the exact SVD of Σ_t τ_t."""
    left, values, right = factor_svd(_present(deltas, name), rtol)
    if values.numel() == 0:
        return LoraDelta(B=left.to(torch.float32), A=right.T.to(torch.float32))
    return LoraDelta(B=(alpha * values.mean() * left).to(torch.float32), A=right.T.to(torch.float32))


def lowrank_tsv_m(
    deltas: Sequence[LoraDelta | None], alpha: float, name: str = "weight", rtol: float = RANK_RTOL
) -> LoraDelta:
    """TSV-M on factors: top k=⌊min(m,n)/T⌋ triplets of each τ_t, both sides polar-orthogonalised."""
    present = _present(deltas, name)
    k = max(1, min(present[0].shape) // len(deltas))
    parts = [factor_svd([delta], rtol) for delta in present]
    return _from_subspaces(
        torch.cat([left[:, :k] for left, _, _ in parts], dim=1),
        torch.cat([values[:k] for _, values, _ in parts]),
        torch.cat([right[:, :k] for _, _, right in parts], dim=1),
        alpha,
    )


def lowrank_iso_cts(
    deltas: Sequence[LoraDelta | None],
    common_fraction: float,
    alpha: float,
    name: str = "weight",
    rtol: float = RANK_RTOL,
) -> LoraDelta:
    """Iso-CTS on factors: common directions of Σ_t τ_t plus per-task residual directions, isotropic."""
    present = _present(deltas, name)
    left, values, right = factor_svd(present, rtol)
    rank = values.numel()
    if rank == 0:
        return LoraDelta(B=left.to(torch.float32), A=right.T.to(torch.float32))
    tol = rtol * values[0].item()
    common = max(1, math.floor(common_fraction * rank))
    per_task = (rank - common) // len(deltas)
    common_left = left[:, :common]
    lefts, kept, rights = [common_left], [values[:common]], [right[:, :common]]
    if per_task > 0:
        for delta in present:
            scaled_b = delta.scale * delta.B.to(torch.float64)
            residual = LoraDelta(B=scaled_b - common_left @ (common_left.T @ scaled_b), A=delta.A)
            task_left, task_values, task_right = factor_svd([residual], tol=tol)
            lefts.append(task_left[:, :per_task])
            kept.append(task_values[:per_task])
            rights.append(task_right[:, :per_task])
    all_values = torch.cat(kept)
    iso = torch.full_like(all_values, all_values.mean().item())
    return _from_subspaces(torch.cat(lefts, dim=1), iso, torch.cat(rights, dim=1), alpha)


def lowrank_pact_filter(
    name: str, base_weight: Tensor, deltas: Sequence[LoraDelta | None], config: PactConfig
) -> list[LoraDelta | None]:
    """PACT on factors: task subspaces from exact factor SVDs; the filter edits A (right) or B (left)."""
    present = _present(deltas, name)
    if present[0].shape != tuple(base_weight.shape):
        raise InvalidInput(
            f"{name}: LoRA updates are {present[0].shape[0]}×{present[0].shape[1]} but the base weight has "
            f"shape {tuple(base_weight.shape)}"
        )
    k = config.task_rank(base_weight.shape)
    subspaces = []
    for delta in deltas:
        if delta is None:
            size = base_weight.shape[1] if config.side == "right" else base_weight.shape[0]
            subspaces.append(torch.zeros(size, 0, dtype=torch.float64))
            continue
        left, _, right = factor_svd([delta])
        subspaces.append((right if config.side == "right" else left)[:, :k])
    filtered: list[LoraDelta | None] = []
    for delta, shield in zip(
        deltas, shields(anchor_subspace(name, base_weight, config), subspaces), strict=True
    ):
        if delta is None:
            filtered.append(None)
        elif config.side == "right":
            a = delta.A.to(torch.float64)
            filtered.append(
                LoraDelta(B=delta.B, A=(a - (a @ shield) @ shield.T).to(torch.float32), scale=delta.scale)
            )
        else:
            b = delta.B.to(torch.float64)
            filtered.append(
                LoraDelta(B=(b - shield @ (shield.T @ b)).to(torch.float32), A=delta.A, scale=delta.scale)
            )
    return filtered
