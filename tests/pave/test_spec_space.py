"""Spec spaces: ids, shapes, and the shared frozen A."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from app.ml.bases import resolve_base
from app.ml.encoders import load_encoder
from app.ml.errors import IncompatibleSpec, UnknownBase
from app.ml.pave import fit_pave_spec
from app.ml.spec_space import FitRecipe, SpecSpace, SpecSpaceConfig, check_vector, shared_lora_a, space_id
from tests.pave.conftest import LABELS, NAMES, TEXTS


def test_dim_is_layers_times_targets_times_m_by_r(tiny_space: SpecSpace) -> None:
    # 2 layers x (query, value) x B of 32 x 4.
    assert tiny_space.layers == [
        "encoder.layer.0.attention.self.query",
        "encoder.layer.0.attention.self.value",
        "encoder.layer.1.attention.self.query",
        "encoder.layer.1.attention.self.value",
    ]
    assert tiny_space.layer_shapes == [(32, 4)] * 4
    assert tiny_space.dim == 4 * 32 * 4
    described = tiny_space.describe()
    assert described["dim"] == tiny_space.dim and described["id"] == tiny_space.id


def test_space_id_depends_on_weights_and_recipe_not_alias(tiny_config: SpecSpaceConfig) -> None:
    a = space_id(tiny_config, "0" * 64)
    assert space_id(tiny_config, "1" * 64) != a
    assert space_id(tiny_config.with_recipe(steps=10), "0" * 64) != a
    renamed = SpecSpaceConfig(**{**tiny_config.__dict__, "base": "/elsewhere/same-weights"})
    assert space_id(renamed, "0" * 64) == a


def test_a_is_shared_frozen_and_seeded(tiny_space: SpecSpace, tiny_config: SpecSpaceConfig) -> None:
    def a_matrices(space: SpecSpace) -> list[torch.Tensor]:
        return [p.detach().clone() for n, p in space.model.named_parameters() if "lora_A" in n]

    before = a_matrices(tiny_space)
    assert all(not p.requires_grad for n, p in tiny_space.model.named_parameters() if "lora_A" in n)
    fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task", recipe=FitRecipe(steps=5))
    after = a_matrices(tiny_space)
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))
    # A second, independently loaded space of the same config has the very same A.
    other = SpecSpace(tiny_config, load_encoder(tiny_config.base, fresh=True))
    assert other.id == tiny_space.id
    assert all(torch.equal(x, y) for x, y in zip(before, a_matrices(other), strict=True))


def test_a_has_the_stated_second_moment() -> None:
    a = shared_lora_a("layer", rank=8, in_features=4096, seed=3, scale=1.0).double()
    gram = a @ a.T
    assert torch.allclose(torch.diag(gram), torch.ones(8, dtype=torch.float64), atol=0.06)
    off = gram - torch.diag(torch.diag(gram))
    assert off.abs().max() < 0.1


def test_cos_of_b_tracks_cos_of_ba() -> None:
    """Because E[AAᵀ] = sI, cos(B1·A, B2·A) ≈ cos(B1, B2): the spec need not form ΔW."""
    gen = torch.Generator().manual_seed(0)
    a = shared_lora_a("encoder.layer.0.attention.self.query", rank=8, in_features=384, seed=0, scale=1.0)
    shared = torch.randn(384, 8, generator=gen)
    cos_b, cos_ba = [], []
    for i in range(40):
        mix = i / 40
        b1 = shared + torch.randn(384, 8, generator=gen) * (1 - mix) * 2
        b2 = shared + torch.randn(384, 8, generator=gen) * (1 - mix) * 2
        cos_b.append(torch.nn.functional.cosine_similarity(b1.flatten(), b2.flatten(), dim=0).item())
        cos_ba.append(
            torch.nn.functional.cosine_similarity((b1 @ a).flatten(), (b2 @ a).flatten(), dim=0).item()
        )
    assert np.corrcoef(cos_b, cos_ba)[0, 1] > 0.99
    assert np.max(np.abs(np.subtract(cos_b, cos_ba))) < 0.1


def test_check_vector_refuses_bad_specs(tiny_space: SpecSpace) -> None:
    good = np.ones(tiny_space.dim, dtype=np.float32)
    check_vector(good, tiny_space, tiny_space.id)
    with pytest.raises(IncompatibleSpec, match="shape"):
        check_vector(good[:-1], tiny_space)
    nan = good.copy()
    nan[3] = np.nan
    with pytest.raises(IncompatibleSpec, match="NaN"):
        check_vector(nan, tiny_space)
    with pytest.raises(IncompatibleSpec, match="space"):
        check_vector(good, tiny_space, "pave-other")
    with pytest.raises(IncompatibleSpec, match="zeros"):
        check_vector(np.zeros(tiny_space.dim, dtype=np.float32), tiny_space)


def test_unknown_base_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnknownBase, match="neither a registered alias"):
        resolve_base(tmp_path / "missing")
