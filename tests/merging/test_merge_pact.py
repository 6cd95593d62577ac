"""PACT: shields built from the other tasks' load-bearing walls, filtered vectors orthogonal to them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor

from app.ml.merging import PactConfig, get_method, merge_tensor, pact_filter, pact_shields

NAME = "encoder.layer.0.attention.self.query.weight"


def _config(side: str = "right", svd: str = "exact", anchor: float = 0.15, task: float = 0.2) -> PactConfig:
    params = get_method("iso_c").resolve(
        {"pact": True, "pact_side": side, "pact_svd": svd, "pact_anchor_rank": anchor, "pact_task_rank": task}
    )
    config = PactConfig.from_params(params)
    assert config is not None
    return config


def _low_rank_taus(generator: torch.Generator, count: int = 3) -> list[Tensor]:
    return [
        torch.randn(24, 4, generator=generator) @ torch.randn(4, 20, generator=generator)
        for _ in range(count)
    ]


@pytest.mark.parametrize("side", ["right", "left"])
def test_filtered_vectors_are_orthogonal_to_their_shield(
    side: str, base_weight: Tensor, generator: torch.Generator
) -> None:
    taus = _low_rank_taus(generator)
    config = _config(side)
    shields = pact_shields(NAME, base_weight, taus, config)
    filtered = pact_filter(NAME, base_weight, taus, config)
    for tau, shield, kept in zip(taus, shields, filtered, strict=True):
        assert shield.shape[1] > 0
        projection = kept.double() @ shield if side == "right" else shield.T @ kept.double()
        assert torch.linalg.norm(projection) < 1e-5 * torch.linalg.norm(tau.double())
        assert torch.linalg.norm(kept - tau) > 0


def _reference_filter(base: np.ndarray, taus: list[np.ndarray], anchor: int, task: int) -> list[np.ndarray]:
    """PACT as the paper writes it, right side, exact SVDs, QR for orth()."""
    v0 = np.linalg.svd(base)[2][:anchor].T
    walls = []
    for tau in taus:
        vt = np.linalg.svd(tau)[2][:task].T
        walls.append(np.linalg.qr((np.eye(base.shape[1]) - vt @ vt.T) @ v0)[0])
    out = []
    for t, tau in enumerate(taus):
        shield = np.linalg.qr(np.concatenate([w for j, w in enumerate(walls) if j != t], axis=1))[0]
        out.append(tau - tau @ shield @ shield.T)
    return out


def test_filter_matches_the_paper_formula(base_weight: Tensor, generator: torch.Generator) -> None:
    taus = _low_rank_taus(generator)
    config = _config(anchor=0.15, task=0.2)
    anchor = config.anchor_rank(base_weight.shape)
    task = min(config.task_rank(base_weight.shape), 4)
    expected = _reference_filter(
        base_weight.double().numpy(), [tau.double().numpy() for tau in taus], anchor, task
    )
    for actual, reference in zip(pact_filter(NAME, base_weight, taus, config), expected, strict=True):
        assert np.linalg.norm(actual.double().numpy() - reference) < 1e-5 * np.linalg.norm(reference)


def test_a_single_task_is_left_alone(base_weight: Tensor, generator: torch.Generator) -> None:
    tau = _low_rank_taus(generator, 1)
    assert torch.allclose(pact_filter(NAME, base_weight, tau, _config())[0], tau[0], atol=1e-6)


def test_randomized_svd_is_deterministic_given_a_seed(
    base_weight: Tensor, generator: torch.Generator
) -> None:
    taus = [torch.randn(24, 20, generator=generator) for _ in range(3)]
    config = _config(svd="randomized")
    first = pact_filter(NAME, base_weight, taus, config)
    second = pact_filter(NAME, base_weight, taus, config)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_randomized_svd_is_close_to_exact_on_low_rank_updates(
    base_weight: Tensor, generator: torch.Generator
) -> None:
    taus = _low_rank_taus(generator)
    exact = pact_filter(NAME, base_weight, taus, _config(svd="exact"))
    randomized = pact_filter(NAME, base_weight, taus, _config(svd="randomized"))
    for a, b in zip(exact, randomized, strict=True):
        assert torch.linalg.norm(a - b) < 1e-2 * torch.linalg.norm(a)


def test_layer_filter_selects_the_tensors(base_weight: Tensor, generator: torch.Generator) -> None:
    finetuned = [base_weight + tau for tau in _low_rank_taus(generator)]
    plain = merge_tensor(NAME, base_weight, finetuned, "iso_c")
    skipped = merge_tensor(
        NAME, base_weight, finetuned, "iso_c", {"pact": True, "pact_layers": r"layer\.[3-5]\."}
    )
    filtered = merge_tensor(
        NAME, base_weight, finetuned, "iso_c", {"pact": True, "pact_layers": r"layer\.[0-2]\."}
    )
    assert torch.equal(plain, skipped)
    assert not torch.allclose(plain, filtered)
