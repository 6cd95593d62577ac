"""Fixtures for the merging tests: small random matrices and LoRA learnwares, seeded."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from app.ml.merging import LoraDelta


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def taus(generator: torch.Generator) -> list[Tensor]:
    """Four dense, full-rank 12×9 task vectors."""
    return [torch.randn(12, 9, generator=generator) for _ in range(4)]


@pytest.fixture
def base_weight(generator: torch.Generator) -> Tensor:
    return torch.randn(24, 20, generator=generator)


@pytest.fixture
def lora_deltas(generator: torch.Generator) -> list[LoraDelta]:
    """Three rank-3 LoRA updates of a 24×20 weight, with different scales."""
    return [
        LoraDelta(
            B=torch.randn(24, 3, generator=generator),
            A=torch.randn(3, 20, generator=generator),
            scale=scale,
        )
        for scale in (0.5, 1.0, 2.0)
    ]


@pytest.fixture(autouse=True)
def _tiny_matrices_on_one_thread(single_thread: None) -> None:
    """Every merging test runs on one thread (``single_thread``, tests/conftest.py)."""
