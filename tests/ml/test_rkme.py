"""RKME baseline: the reduced set tracks its data, and MMD tells distributions apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.ml.data import load_task
from app.ml.encoders import load_encoder
from app.ml.errors import IncompatibleSpec, InvalidInput
from app.ml.rkme import (
    Rkme,
    fit_rkme,
    median_gamma,
    mmd2_to_data,
    rank_rkme,
    rbf_kernel,
    rkme_mmd2,
    rkme_of_texts,
)

GAMMA = 0.05


def blobs(center: float, n: int = 300, d: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(center, 1.0, size=(n, d)) + rng.choice([-2.0, 2.0], size=(n, 1))


def test_rbf_kernel_is_one_on_the_diagonal_and_symmetric() -> None:
    x = blobs(0.0, n=20)
    k = rbf_kernel(x, x, GAMMA)
    np.testing.assert_allclose(np.diag(k), 1.0)
    np.testing.assert_allclose(k, k.T)
    assert np.all((k > 0) & (k <= 1))


def test_mmd_is_zero_for_the_same_data_and_grows_with_the_shift() -> None:
    data = blobs(0.0)
    same = fit_rkme(data, m=40, steps=20, gamma=GAMMA)
    assert rkme_mmd2(same, same) == pytest.approx(0.0, abs=1e-12)
    assert rkme_mmd2(same, fit_rkme(data, m=40, steps=20, gamma=GAMMA)) == pytest.approx(0.0, abs=1e-12)
    resample = fit_rkme(blobs(0.0, seed=1), m=40, steps=20, gamma=GAMMA, seed=1)
    near = fit_rkme(blobs(0.5, seed=2), m=40, steps=20, gamma=GAMMA)
    far = fit_rkme(blobs(2.0, seed=3), m=40, steps=20, gamma=GAMMA)
    distances = [rkme_mmd2(same, other) for other in (resample, near, far)]
    assert distances[0] < distances[1] < distances[2]
    assert distances[0] < 0.1 * distances[2]
    assert rkme_mmd2(same, far) == pytest.approx(rkme_mmd2(far, same))


def test_reduced_set_fits_its_data_better_than_kmeans_alone() -> None:
    data = blobs(0.0, n=400)
    init = fit_rkme(data, m=20, steps=0, gamma=GAMMA)
    fitted = fit_rkme(data, m=20, steps=50, gamma=GAMMA)
    assert mmd2_to_data(fitted, data) < mmd2_to_data(init, data)
    assert mmd2_to_data(fitted, data) < 0.1 * mmd2_to_data(fit_rkme(blobs(2.0), m=20, gamma=GAMMA), data)
    assert fitted.z.shape == (20, 8) and fitted.beta.shape == (20,)


def test_small_sets_are_their_own_rkme() -> None:
    data = blobs(0.0, n=10)
    rkme = fit_rkme(data, m=100, gamma=GAMMA)
    np.testing.assert_array_equal(rkme.z, data)
    np.testing.assert_allclose(rkme.beta, 0.1)
    assert mmd2_to_data(rkme, data) == pytest.approx(0.0, abs=1e-12)


def test_fit_is_deterministic_for_a_seed() -> None:
    data = blobs(0.0)
    a, b = (
        fit_rkme(data, m=30, steps=10, seed=4, gamma=GAMMA),
        fit_rkme(data, m=30, steps=10, seed=4, gamma=GAMMA),
    )
    np.testing.assert_array_equal(a.z, b.z)
    np.testing.assert_array_equal(a.beta, b.beta)


def test_rank_puts_the_same_distribution_first() -> None:
    specs = {
        i: fit_rkme(blobs(c, seed=i), m=30, steps=10, gamma=GAMMA) for i, c in enumerate([3.0, 0.0, 1.0])
    }
    query = fit_rkme(blobs(0.0, seed=9), m=30, steps=10, gamma=GAMMA)
    ranked = rank_rkme(query, specs)
    assert [m.id for m in ranked] == [1, 2, 0]
    assert ranked[0].mmd2 < ranked[1].mmd2 < ranked[2].mmd2
    assert [m.id for m in rank_rkme(query, specs, k=1)] == [1]


def test_refuses_incomparable_rkmes_and_bad_features() -> None:
    data = blobs(0.0, n=50)
    with pytest.raises(IncompatibleSpec, match="different kernels"):
        rkme_mmd2(fit_rkme(data, m=10, gamma=0.1), fit_rkme(data, m=10, gamma=0.2))
    with pytest.raises(IncompatibleSpec, match="8 and 4 dimensions"):
        rkme_mmd2(fit_rkme(data, m=10), Rkme(np.zeros((1, 4)), np.ones(1), 0.03))
    with pytest.raises(InvalidInput, match="shape"):
        fit_rkme(np.zeros(5))
    with pytest.raises(InvalidInput, match="NaN"):
        fit_rkme(np.full((5, 2), np.nan))
    with pytest.raises(InvalidInput, match="gamma > 0"):
        fit_rkme(data, gamma=0.0)


def test_median_gamma_is_the_inverse_median_squared_distance() -> None:
    x = np.array([[0.0], [1.0], [3.0]])  # squared distances 1, 9, 4: median 4
    assert median_gamma(x) == pytest.approx(0.25)
    with pytest.raises(InvalidInput, match="identical"):
        median_gamma(np.ones((4, 3)))


@pytest.mark.real_model
def test_rkme_of_real_texts_finds_their_task(datasets_dir: Path) -> None:
    encoder = load_encoder("all-MiniLM-L6-v2")
    names = ["sst2", "trec", "sms_spam"]
    market = {
        i: rkme_of_texts(encoder, load_task(datasets_dir, name, "train", limit=50, seed=0).texts, m=30)
        for i, name in enumerate(names)
    }
    for i, name in enumerate(names):
        user = rkme_of_texts(encoder, load_task(datasets_dir, name, "test", limit=20, seed=1).texts, m=30)
        assert rank_rkme(user, market)[0].id == i
