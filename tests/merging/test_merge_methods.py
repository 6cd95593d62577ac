"""Each dense merge method against a plain reference implementation written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import Tensor

from app.ml.merging import (
    merge_dare,
    merge_iso_c,
    merge_iso_cts,
    merge_task_arithmetic,
    merge_tensor,
    merge_ties,
    merge_tsv_m,
)
from app.ml.merging.methods import tensor_seed


def _np(taus: list[Tensor]) -> list[np.ndarray]:
    return [tau.double().numpy() for tau in taus]


def _polar(matrix: np.ndarray) -> np.ndarray:
    left, _, right_h = np.linalg.svd(matrix, full_matrices=False)
    return left @ right_h


def _close(actual: Tensor, expected: np.ndarray | float, rtol: float = 1e-5) -> None:
    reference = np.asarray(expected, dtype=np.float64)
    error = np.linalg.norm(actual.double().numpy() - reference) / max(float(np.linalg.norm(reference)), 1e-30)
    assert error < rtol, f"relative error {error:.2e}"


def test_task_arithmetic_is_lambda_times_sum(taus: list[Tensor]) -> None:
    expected = 0.3 * sum(_np(taus))
    _close(merge_task_arithmetic(taus, 0.3), expected)


def _ties_reference(taus: list[Tensor], k: float, lam: float) -> np.ndarray:
    trimmed = []
    for tau in _np(taus):
        flat = np.abs(tau).ravel()
        keep = math.ceil(k * flat.size)
        threshold = np.sort(flat)[::-1][keep - 1]
        trimmed.append(np.where(np.abs(tau) >= threshold, tau, 0.0))
    out = np.zeros_like(trimmed[0])
    for index in np.ndindex(out.shape):
        values = [t[index] for t in trimmed]
        sign = np.sign(sum(values))
        agreeing = [v for v in values if v != 0 and np.sign(v) == sign]
        out[index] = lam * (sum(agreeing) / len(agreeing) if agreeing else 0.0)
    return out


@pytest.mark.parametrize("k", [0.1, 0.3, 1.0])
def test_ties_matches_reference(taus: list[Tensor], k: float) -> None:
    _close(merge_ties(taus, k, 1.7), _ties_reference(taus, k, 1.7))


def test_ties_keeps_top_k_per_tensor_not_globally() -> None:
    small = torch.full((4, 4), 1e-3)
    small[0, 0] = 2e-3
    big = torch.full((4, 4), 10.0)
    big[1, 1] = 20.0
    merged_small = merge_ties([small], 1 / 16, 1.0)
    merged_big = merge_ties([big], 1 / 16, 1.0)
    assert torch.count_nonzero(merged_small) == 1 and merged_small[0, 0] == pytest.approx(2e-3)
    assert torch.count_nonzero(merged_big) == 1 and merged_big[1, 1] == 20.0


def _dare_masks(taus: list[Tensor], p: float, seed: int, name: str = "tensor") -> list[Tensor]:
    """The drop masks DARE documents: one generator per task, seeded from (seed, name, task)."""
    return [
        torch.rand(tau.shape, generator=torch.Generator().manual_seed(tensor_seed(seed, f"{name}#{t}"))) >= p
        for t, tau in enumerate(taus)
    ]


def test_dare_matches_reference_masks(taus: list[Tensor]) -> None:
    p, lam = 0.6, 0.7
    masks = _dare_masks(taus, p, seed=7)
    expected = sum(
        tau.double().numpy() * mask.numpy() / (1 - p) for tau, mask in zip(taus, masks, strict=True)
    )
    _close(merge_dare(taus, p, lam, seed=7), lam * np.asarray(expected))
    kept = torch.cat([mask.reshape(-1) for mask in masks]).float().mean().item()
    assert abs(kept - (1 - p)) < 0.1


def test_dare_with_ties_applies_ties_to_dropped_vectors(taus: list[Tensor]) -> None:
    masks = _dare_masks(taus, 0.5, seed=3)
    dropped = [tau * mask / 0.5 for tau, mask in zip(taus, masks, strict=True)]
    actual = merge_dare(taus, 0.5, 1.0, seed=3, combine="ties", k=0.3)
    _close(actual, _ties_reference(dropped, 0.3, 1.0))


def test_dare_without_dropping_is_task_arithmetic(taus: list[Tensor]) -> None:
    _close(merge_dare(taus, 0.0, 0.4, seed=0), 0.4 * sum(_np(taus)))


def test_tsv_m_equals_its_formula(taus: list[Tensor]) -> None:
    count = len(taus)
    k = min(taus[0].shape) // count
    lefts, values, rights = [], [], []
    for tau in _np(taus):
        left, value, right_h = np.linalg.svd(tau, full_matrices=False)
        lefts.append(left[:, :k])
        values.append(value[:k])
        rights.append(right_h[:k].T)
    u_perp = _polar(np.concatenate(lefts, 1))
    v_perp = _polar(np.concatenate(rights, 1))
    expected = 1.2 * u_perp @ np.diag(np.concatenate(values)) @ v_perp.T
    _close(merge_tsv_m(taus, 1.2), expected)


def test_iso_c_equals_its_formula(taus: list[Tensor]) -> None:
    left, values, right_h = np.linalg.svd(sum(_np(taus)), full_matrices=False)
    expected = 1.3 * values.mean() * left @ right_h
    merged = merge_iso_c(taus, 1.3)
    _close(merged, expected)
    singular = torch.linalg.svdvals(merged.double())
    assert torch.allclose(singular, singular[0].expand_as(singular), rtol=1e-5), "Iso-C spectrum is flat"


def test_iso_cts_matches_reference(taus: list[Tensor]) -> None:
    fraction, alpha = 0.5, 0.9
    arrays = _np(taus)
    rank = min(arrays[0].shape)
    common = math.floor(fraction * rank)
    per_task = (rank - common) // len(arrays)
    left, values, right_h = np.linalg.svd(sum(arrays), full_matrices=False)
    lefts, kept, rights = [left[:, :common]], [values[:common]], [right_h[:common].T]
    for tau in arrays:
        residual = tau - left[:, :common] @ left[:, :common].T @ tau
        task_left, task_values, task_right_h = np.linalg.svd(residual, full_matrices=False)
        lefts.append(task_left[:, :per_task])
        kept.append(task_values[:per_task])
        rights.append(task_right_h[:per_task].T)
    mean_value = np.concatenate(kept).mean()
    expected = alpha * mean_value * _polar(np.concatenate(lefts, 1)) @ _polar(np.concatenate(rights, 1)).T
    assert per_task >= 1
    _close(merge_iso_cts(taus, fraction, alpha), expected)


@pytest.mark.parametrize("method", ["tsv_m", "iso_c", "iso_cts"])
def test_svd_methods_average_one_dimensional_tensors(method: str, generator: torch.Generator) -> None:
    base = torch.randn(9, generator=generator)
    finetuned = [base + torch.randn(9, generator=generator) for _ in range(3)]
    merged = merge_tensor("encoder.bias", base, finetuned, method)
    expected = base + torch.stack([weight - base for weight in finetuned]).mean(0)
    assert torch.allclose(merged, expected, atol=1e-6)


def test_elementwise_methods_run_on_one_dimensional_tensors(generator: torch.Generator) -> None:
    base = torch.randn(9, generator=generator)
    finetuned = [base + torch.randn(9, generator=generator) for _ in range(3)]
    merged = merge_tensor("encoder.bias", base, finetuned, "task_arithmetic", {"lam": 0.25})
    expected = base + 0.25 * torch.stack([weight - base for weight in finetuned]).sum(0)
    assert torch.allclose(merged, expected, atol=1e-6)


def test_merge_tensor_returns_the_base_dtype(generator: torch.Generator) -> None:
    base = torch.randn(8, 6, generator=generator).to(torch.bfloat16)
    finetuned = [
        (base.float() + 0.1 * torch.randn(8, 6, generator=generator)).to(torch.bfloat16) for _ in range(2)
    ]
    for method in ("task_arithmetic", "ties", "dare", "tsv_m", "iso_c", "iso_cts"):
        assert merge_tensor("w", base, finetuned, method).dtype == torch.bfloat16


def test_low_rank_updates_get_no_null_space_directions(generator: torch.Generator) -> None:
    """Iso-C of rank-2 updates stays rank ≤ 4: rounding noise is not lifted to the mean singular value."""
    taus = [
        torch.randn(30, 2, generator=generator) @ torch.randn(2, 25, generator=generator) for _ in range(2)
    ]
    for merged in (merge_iso_c(taus, 1.0), merge_tsv_m(taus, 1.0), merge_iso_cts(taus, 0.8, 1.0)):
        assert torch.linalg.matrix_rank(merged.double(), rtol=1e-4) <= 4


@pytest.mark.parametrize("method", ["task_arithmetic", "ties", "dare", "tsv_m", "iso_c", "iso_cts"])
def test_inputs_are_never_modified(method: str, generator: torch.Generator) -> None:
    base = torch.randn(12, 9, generator=generator)
    finetuned = [base + torch.randn(12, 9, generator=generator) for _ in range(3)]
    copies = [weight.clone() for weight in [base, *finetuned]]
    merge_tensor("layer.0.w", base, finetuned, method, {"pact": True})
    assert all(torch.equal(a, b) for a, b in zip([base, *finetuned], copies, strict=True))
