"""Thin SVDs of tall matrices through their Gram matrix, in bounded memory.

The SVD methods decompose every weight matrix in float64. For a square matrix that is cheap, but
a word-embedding matrix is tall (MiniLM's is 30522×384, 54% of the model): a float64 copy, LAPACK's
workspace and a full m×n U cost several times the float32 matrix, and set the peak memory of a
whole streaming merge. For M (m×n, m ≥ `TALL_RATIO`·n, at least `GRAM_MIN_ELEMENTS` entries) this
module works with G = MᵀM instead:

- G is n×n, accumulated in float64 from row blocks of `CHUNK_ROWS`, so M is never copied whole;
- eigh(G) gives the right singular vectors V and σ² (descending);
- U = M·V·Σ⁻¹ and products such as M·W are formed block by block, only for the columns kept.

Squaring M squares its condition number: σ below about √ε·σ_max ≈ 1.5e-8·σ_max cannot be told
from zero in G. Every caller cuts the spectrum far above that (`RANK_RTOL` = 1e-4 for task
vectors; `GRAM_POLAR_RTOL` = 1e-6 for the polar factor of stacked singular vectors), so a kept
direction is accurate to about ε·(σ_max/σ)² ≤ 1e-8. A wide matrix is handled as its transpose.
"""

from __future__ import annotations

import torch
from torch import Tensor

RANK_RTOL = 1e-4
"""Singular values at or below this fraction of the largest count as zero."""

TALL_RATIO = 4
"""A matrix with at least this many times more rows than columns (or the reverse) is tall (wide)."""

GRAM_MIN_ELEMENTS = 1 << 20
"""Smaller matrices keep LAPACK's SVD (more accurate, and their memory does not matter)."""

CHUNK_ROWS = 4096
"""Rows converted to float64 at a time."""

GRAM_POLAR_RTOL = 1e-6
"""The polar factor's relative cut on the Gram path (σ below √ε·σ_max is not resolved there)."""


def numerical_rank(singular_values: Tensor, tol: float) -> int:
    """How many of the (descending) singular values lie above `tol`."""
    return int((singular_values > tol).sum().item())


def gram_orientation(shape: torch.Size | tuple[int, ...]) -> str | None:
    """ "tall" or "wide" when a matrix of this shape takes the Gram path, else None."""
    if len(shape) != 2 or shape[0] * shape[1] < GRAM_MIN_ELEMENTS:
        return None
    rows, cols = shape
    if rows >= TALL_RATIO * cols:
        return "tall"
    if cols >= TALL_RATIO * rows:
        return "wide"
    return None


def row_blocks(rows: int) -> list[slice]:
    """Slices of `CHUNK_ROWS` rows covering `rows` rows."""
    return [slice(start, start + CHUNK_ROWS) for start in range(0, rows, CHUNK_ROWS)]


def gram(matrix: Tensor) -> Tensor:
    """MᵀM in float64, accumulated over row blocks (M is never copied whole)."""
    total = torch.zeros(matrix.shape[1], matrix.shape[1], dtype=torch.float64)
    for rows in row_blocks(matrix.shape[0]):
        block = matrix[rows].to(torch.float64)
        total.addmm_(block.T, block)
    return total


def times(matrix: Tensor, right: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """M·right computed in float64 block by block, returned in `dtype` (M is never copied whole)."""
    right = right.to(torch.float64)
    out = torch.empty(matrix.shape[0], right.shape[1], dtype=dtype)
    for rows in row_blocks(matrix.shape[0]):
        out[rows] = (matrix[rows].to(torch.float64) @ right).to(dtype)
    return out


def transposed_times(matrix: Tensor, other: Tensor) -> Tensor:
    """Mᵀ·other (both with m rows) in float64, accumulated over row blocks."""
    total = torch.zeros(matrix.shape[1], other.shape[1], dtype=torch.float64)
    for rows in row_blocks(matrix.shape[0]):
        total.addmm_(matrix[rows].to(torch.float64).T, other[rows].to(torch.float64))
    return total


def remove_column_space(matrix: Tensor, basis: Tensor) -> Tensor:
    """M − B·(BᵀM) for orthonormal columns B (m×s), in M's dtype, block by block."""
    projection = transposed_times(basis, matrix)
    out = torch.empty_like(matrix)
    for rows in row_blocks(matrix.shape[0]):
        block = matrix[rows].to(torch.float64) - basis[rows].to(torch.float64) @ projection
        out[rows] = block.to(matrix.dtype)
    return out


def remove_row_space(matrix: Tensor, basis: Tensor) -> Tensor:
    """M − (M·B)·Bᵀ for orthonormal columns B (n×s), in M's dtype, block by block."""
    basis = basis.to(torch.float64)
    out = torch.empty_like(matrix)
    for rows in row_blocks(matrix.shape[0]):
        block = matrix[rows].to(torch.float64)
        out[rows] = (block - (block @ basis) @ basis.T).to(matrix.dtype)
    return out


def gram_spectrum(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """(σ descending, V: n×n) of a tall M from eigh(MᵀM), both float64; σ² below zero clamped."""
    eigenvalues, vectors = torch.linalg.eigh(gram(matrix))
    values = eigenvalues.flip(0).clamp_(min=0.0).sqrt_()
    return values, vectors.flip(1)


def svd_top(
    matrix: Tensor, k: int | None = None, tol: float | None = None, rtol: float = RANK_RTOL
) -> tuple[Tensor, Tensor, Tensor]:
    """The top min(k, numerical rank) singular triplets (U: m×ρ, S: ρ, V: n×ρ) of M.

    Singular values at or below `tol` (default `rtol`·σ_max) count as zero; `k=None` keeps the
    whole numerical rank. Tall and wide matrices go through the Gram path, the rest through
    LAPACK on a float64 copy. Everything is float64 except, on the Gram path, the factor on the
    long side (U of a tall M, V of a wide one): float32, the size of M's float32 columns, not twice it.
    """
    orientation = gram_orientation(matrix.shape)
    if orientation is None:
        left, values, right_h = torch.linalg.svd(matrix.to(torch.float64), full_matrices=False)
        keep = _keep(values, k, tol, rtol)
        # Copies, not views: a view would keep the full factors alive.
        return left[:, :keep].clone(), values[:keep].clone(), right_h[:keep].T.clone()
    oriented = matrix if orientation == "tall" else matrix.T
    values, vectors = gram_spectrum(oriented)
    keep = _keep(values, k, tol, rtol)
    values, vectors = values[:keep].clone(), vectors[:, :keep].clone()
    other = times(oriented, vectors / values, torch.float32)
    return (other, values, vectors) if orientation == "tall" else (vectors, values, other)


def _keep(values: Tensor, k: int | None, tol: float | None, rtol: float) -> int:
    if values.numel() == 0 or values[0].item() == 0.0:
        return 0
    rank = numerical_rank(values, rtol * values[0].item() if tol is None else tol)
    return rank if k is None else min(k, rank)


def polar_map(matrix: Tensor, rtol: float) -> Tensor:
    """W (n×n, float64) with M·W = the polar factor of a tall M over its numerical rank:
    W = V·Σ⁻¹·Vᵀ from eigh(MᵀM), cut at max(rtol, `GRAM_POLAR_RTOL`)·σ_max."""
    values, vectors = gram_spectrum(matrix)
    keep = _keep(values, None, None, max(rtol, GRAM_POLAR_RTOL))
    kept = vectors[:, :keep]
    return (kept / values[:keep]) @ kept.T
