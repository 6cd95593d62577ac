"""Dense merge methods: pure functions from the task vectors of one tensor to its merged delta.

Every function takes τ_1..τ_T of one tensor (all the same shape), computes in float32
(float64 for SVDs) and returns the merged delta δ in float32, already scaled by λ or α:
the merged weight is θ0 + δ. The caller casts back to the base's dtype.

`taus` may be a lazy sequence that rebuilds τ_t from disk on every read (the streaming driver
passes one): the functions read one τ_t at a time and keep running sums or small SVD factors,
never all T task vectors, making a pass over the sequence more than once where a method needs
it (TIES three times, Iso-CTS twice).

Numerical rank: the SVD methods treat singular values at or below `rtol · σ_max` as zero.
A sum of LoRA updates has rank ≤ Σr, and the rest of its spectrum is rounding noise; without
the cut, Iso-C would lift that noise to the mean singular value, and TSV-M would orthogonalise
arbitrary null-space vectors together with the real ones.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Literal, TypeVar, overload

import torch
from torch import Tensor

from app.ml.errors import InvalidInput
from app.ml.merging.linalg import (
    RANK_RTOL,
    gram_orientation,
    gram_spectrum,
    numerical_rank,
    polar_map,
    remove_column_space,
    row_blocks,
    svd_top,
    times,
)

__all__ = ["RANK_RTOL", "numerical_rank"]

Combine = Literal["task_arithmetic", "ties"]


def tensor_seed(seed: int, name: str) -> int:
    """A per-tensor seed, so a tensor's random draws do not depend on the order tensors are visited."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)


Item = TypeVar("Item")


class MappedTaskVectors(Sequence[Tensor], Generic[Item]):
    """τ̃_t = fn(t, item_t), computed when read: a filtered or dropped view of task vectors, or task
    vectors read from their sources, that holds no tensors."""

    def __init__(self, taus: Sequence[Item], fn: Callable[[int, Item], Tensor]) -> None:
        self._taus = taus
        self._fn = fn

    def __len__(self) -> int:
        return len(self._taus)

    @overload
    def __getitem__(self, index: int) -> Tensor: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Tensor]: ...

    def __getitem__(self, index: int | slice) -> Tensor | Sequence[Tensor]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        return self._fn(index, self._taus[index])


def iter_task_vectors(taus: Sequence[Tensor], name: str = "tensor", matrix: bool = False) -> Iterator[Tensor]:
    """Yield τ_1..τ_T as float32, one at a time, checking that their shapes agree (and are 2-D if `matrix`)."""
    if len(taus) == 0:
        raise InvalidInput(f"{name}: no task vectors to merge")
    shape: torch.Size | None = None
    for index in range(len(taus)):
        tau = taus[index].to(torch.float32)
        if shape is None:
            shape = tau.shape
            if matrix and tau.dim() != 2:
                raise InvalidInput(f"{name}: this method needs 2-D tensors, got shape {tuple(shape)}")
        elif tau.shape != shape:
            raise InvalidInput(
                f"{name}: task vector {index} has shape {tuple(tau.shape)} but task vector 0 has {tuple(shape)}"
            )
        yield tau


def sum_task_vectors(taus: Sequence[Tensor], name: str = "tensor", matrix: bool = False) -> Tensor:
    """Σ_t τ_t in float32, accumulated one task vector at a time."""
    total: Tensor | None = None
    for tau in iter_task_vectors(taus, name, matrix):
        total = tau.clone() if total is None else total.add_(tau)
    assert total is not None
    return total


POLAR_RTOL = 1e-8
"""Directions of a concatenation below this fraction of its largest singular value are dropped by
`polar_factor`: identical task vectors (the same learnware twice) give exactly dependent columns."""


def polar_factor(matrix: Tensor, rtol: float = POLAR_RTOL) -> Tensor:
    """The polar factor P·Qᵀ of `matrix` = P·Σ·Qᵀ: the nearest matrix with orthonormal columns.

    Only the directions with σ > rtol·σ_max are kept, so dependent columns (duplicated tasks) give a
    well-defined partial isometry instead of arbitrary null-space vectors. Tall and wide matrices
    take the Gram path (`linalg.polar_map`).
    """
    orientation = gram_orientation(matrix.shape)
    if orientation == "tall":
        return times(matrix, polar_map(matrix, rtol))
    if orientation == "wide":
        return polar_factor(matrix.T, rtol).T
    left, values, right_h = torch.linalg.svd(matrix, full_matrices=False)
    if values.numel() == 0 or values[0].item() == 0.0:
        return torch.zeros_like(matrix)
    keep = numerical_rank(values, rtol * values[0].item())
    return left[:, :keep] @ right_h[:keep]


def mean_task_vector(taus: Sequence[Tensor], name: str = "tensor") -> Tensor:
    """(1/T)·Σ_t τ_t: the fallback for tensors a method does not cover (biases, norms, >2-D)."""
    return sum_task_vectors(taus, name) / len(taus)


def merge_task_arithmetic(taus: Sequence[Tensor], lam: float, name: str = "tensor") -> Tensor:
    """Task Arithmetic: δ = λ·Σ_t τ_t."""
    return lam * sum_task_vectors(taus, name)


def top_k_threshold(tau: Tensor, fraction: float) -> float:
    """The magnitude of the ⌈fraction·numel⌉-th largest entry of `tau`: entries at or above it are kept."""
    if not 0.0 < fraction <= 1.0:
        raise InvalidInput(f"top-k fraction {fraction!r} is out of range (0, 1]")
    flat = tau.reshape(-1).abs()
    keep = max(1, math.ceil(fraction * flat.numel()))
    if keep >= flat.numel():
        return 0.0
    # topk of the smaller side instead of kthvalue: it allocates k values and indices, not n of each.
    if keep <= flat.numel() // 2:
        return float(torch.topk(flat, keep, sorted=False).values.min().item())
    return float(torch.topk(flat, flat.numel() - keep + 1, largest=False, sorted=False).values.max().item())


def _as_rows(tensor: Tensor) -> Tensor:
    """A contiguous tensor as a 2-D view (rows × the rest); a scalar as 1×1."""
    return tensor.reshape(tensor.shape[0], -1) if tensor.dim() else tensor.reshape(1, 1)


def _trim(tau: Tensor, threshold: float) -> Tensor:
    """τ with entries below `threshold` in magnitude zeroed, into a new tensor, block by block
    (no tensor-sized temporaries besides the result)."""
    out = torch.empty(tau.shape, dtype=tau.dtype)
    source, target = _as_rows(tau), _as_rows(out)
    for rows in row_blocks(source.shape[0]):
        block = source[rows]
        target[rows] = torch.where(block.abs() >= threshold, block, 0.0)
    return out


def merge_ties(taus: Sequence[Tensor], k: float, lam: float, name: str = "tensor") -> Tensor:
    """TIES: trim each τ_t to its top-k entries, elect a sign per entry, take the disjoint mean, scale by λ.

    Three passes over the task vectors (thresholds, elected sign, disjoint mean), one τ_t at a time.
    """
    thresholds = [top_k_threshold(tau, k) for tau in iter_task_vectors(taus, name)]
    trimmed = MappedTaskVectors(taus, lambda t, tau: _trim(tau.to(torch.float32), thresholds[t]))
    elected = sum_task_vectors(trimmed, name).sign_()
    agreeing_sum = torch.zeros(elected.shape, dtype=elected.dtype)  # contiguous: written through a view
    count = torch.zeros(elected.shape, dtype=torch.int16 if len(taus) < 2**15 else torch.int32)
    sums, counts, signs = _as_rows(agreeing_sum), _as_rows(count), _as_rows(elected)
    for kept in iter_task_vectors(trimmed, name):
        # Block by block: the agreement mask and the masked copy stay block-sized.
        kept_rows = _as_rows(kept)
        for rows in row_blocks(kept_rows.shape[0]):
            part = kept_rows[rows]
            agrees = (part * signs[rows]) > 0
            sums[rows] += part.masked_fill(~agrees, 0.0)
            counts[rows] += agrees
    return agreeing_sum.div_(count.clamp_(min=1)).mul_(lam)


def dare_drop(tau: Tensor, p: float, generator: torch.Generator) -> Tensor:
    """DARE: drop each entry with probability p and rescale the survivors by 1/(1-p)."""
    if not 0.0 <= p < 1.0:
        raise InvalidInput(f"DARE drop probability p={p!r} is out of range [0, 1)")
    keep = torch.rand(tau.shape, generator=generator) >= p
    return tau.to(torch.float32) * keep / (1.0 - p)


def merge_dare(
    taus: Sequence[Tensor],
    p: float,
    lam: float,
    seed: int,
    combine: Combine = "task_arithmetic",
    k: float = 0.2,
    name: str = "tensor",
) -> Tensor:
    """DARE: drop-and-rescale every τ_t, then TA or TIES.

    Task t's mask comes from a generator seeded with `tensor_seed(seed, f"{name}#{t}")`, so a mask
    is the same however often τ_t is read.
    """
    if combine not in ("task_arithmetic", "ties"):
        raise InvalidInput(f"DARE combine={combine!r} is not one of task_arithmetic, ties")

    def drop(t: int, tau: Tensor) -> Tensor:
        return dare_drop(tau, p, torch.Generator().manual_seed(tensor_seed(seed, f"{name}#{t}")))

    dropped = MappedTaskVectors(taus, drop)
    if combine == "task_arithmetic":
        return merge_task_arithmetic(dropped, lam, name)
    return merge_ties(dropped, k, lam, name)


def top_singular_triplets(
    matrix: Tensor, k: int, tol: float | None = None, rtol: float = RANK_RTOL
) -> tuple[Tensor, Tensor, Tensor]:
    """The top min(k, numerical rank) singular triplets (U: m×k, S: k, V: n×k) of `matrix`, in float64.

    Singular values at or below `tol` (default `rtol`·σ_max) count as zero.
    """
    return svd_top(matrix, k, tol, rtol)


def combine_orthogonalised(left: Tensor, values: Tensor, right: Tensor, scale: float = 1.0) -> Tensor:
    """scale·U⊥·diag(S)·V⊥ᵀ in float32, where U⊥, V⊥ are the polar factors of the concatenated
    singular vectors (callers pass fresh concatenations, freed here as soon as they are used)."""
    if values.numel() == 0:
        return torch.zeros(left.shape[0], right.shape[0], dtype=torch.float32)
    if gram_orientation(left.shape) == "tall":
        # U⊥ = L·W: fold W·diag(S)·V⊥ᵀ into one small matrix and form the m×n product block by block.
        core = polar_map(left, POLAR_RTOL) @ (values.to(torch.float64)[:, None] * polar_factor(right).T)
        return times(left, core, torch.float32).mul_(scale)
    scaled_left = polar_factor(left) * values
    del left
    return (scaled_left @ polar_factor(right).T).to(torch.float32).mul_(scale)


def merge_tsv_m(
    taus: Sequence[Tensor], alpha: float, name: str = "tensor", rtol: float = RANK_RTOL
) -> Tensor:
    """TSV-M: top k=⌊min(m,n)/T⌋ triplets per task, polar-orthogonalise the stacked U and V, scale by α."""
    lefts, values, rights = [], [], []
    for tau in iter_task_vectors(taus, name, matrix=True):
        k = max(1, min(tau.shape) // len(taus))
        left, value, right = top_singular_triplets(tau, k, rtol=rtol)
        del tau
        lefts.append(left)
        values.append(value)
        rights.append(right)
    left_all = torch.cat(lefts, 1)
    lefts.clear()
    return combine_orthogonalised(left_all, torch.cat(values), torch.cat(rights, 1), alpha)


def merge_iso_c(
    taus: Sequence[Tensor], alpha: float, name: str = "tensor", rtol: float = RANK_RTOL
) -> Tensor:
    """Iso-C: M = Σ_t τ_t = UΣVᵀ; δ = α·mean(Σ)·U·Vᵀ over M's numerical rank."""
    total = sum_task_vectors(taus, name, matrix=True)
    orientation = gram_orientation(total.shape)
    if orientation is not None:
        return _iso_c_gram(total if orientation == "tall" else total.T, alpha, rtol, orientation == "wide")
    total = total.to(torch.float64)
    shape = total.shape
    left, values, right_h = torch.linalg.svd(total, full_matrices=False)
    del total
    rank = numerical_rank(values, rtol * values[0].item())
    if rank == 0:
        return torch.zeros(shape, dtype=torch.float32)
    mean = values[:rank].mean().item()
    return (left[:, :rank] @ right_h[:rank]).to(torch.float32).mul_(alpha * mean)


def _iso_c_gram(tall: Tensor, alpha: float, rtol: float, transpose: bool) -> Tensor:
    """Iso-C of a tall sum M through its Gram matrix: α·mean(σ)·U·Vᵀ = M·(α·mean(σ)·V·Σ⁻¹·Vᵀ)."""
    values, vectors = gram_spectrum(tall)
    if values.numel() == 0 or values[0].item() == 0.0:
        out = torch.zeros_like(tall)
    else:
        rank = numerical_rank(values, rtol * values[0].item())
        kept = vectors[:, :rank]
        core = (kept / values[:rank]) @ kept.T * (alpha * values[:rank].mean().item())
        out = times(tall, core, torch.float32)
    return out.T.contiguous() if transpose else out


def merge_iso_cts(
    taus: Sequence[Tensor],
    common_fraction: float,
    alpha: float,
    name: str = "tensor",
    rtol: float = RANK_RTOL,
) -> Tensor:
    """Iso-CTS: the top ⌊f·r⌋ directions of Σ_t τ_t plus ⌊(r-c)/T⌋ per task from its residual,
    both sides polar-orthogonalised, every direction scaled by the mean kept singular value, then α.

    r is the numerical rank of Σ_t τ_t (min(m, n) for full-rank updates); at least one common
    direction is kept, so a rank-1 sum still merges.
    """
    total = sum_task_vectors(taus, name, matrix=True)
    shape = total.shape
    spectrum = svd_top(total, rtol=rtol)
    del total
    rank = spectrum[1].numel()
    if rank == 0:
        return torch.zeros(shape, dtype=torch.float32)
    tol = rtol * spectrum[1][0].item()
    common = max(1, math.floor(common_fraction * rank))
    per_task = (rank - common) // len(taus)
    common_left = spectrum[0][:, :common].clone()
    lefts, kept, rights = [common_left], [spectrum[1][:common].clone()], [spectrum[2][:, :common].clone()]
    del spectrum
    if per_task > 0:
        for tau in iter_task_vectors(taus, name, matrix=True):
            # float64 where LAPACK decomposes it; float32 block by block on the Gram path.
            small = gram_orientation(tau.shape) is None
            residual = remove_column_space(tau.to(torch.float64) if small else tau, common_left)
            del tau
            task_left, task_values, task_right = top_singular_triplets(residual, per_task, tol)
            del residual
            lefts.append(task_left)
            kept.append(task_values)
            rights.append(task_right)
    all_values = torch.cat(kept)
    iso = torch.full_like(all_values, all_values.mean().item())
    left_all = torch.cat(lefts, 1)
    lefts.clear()
    return combine_orthogonalised(left_all, iso, torch.cat(rights, 1), alpha)
