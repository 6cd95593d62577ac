"""RKME, the classic learnware specification (the identification baseline).

A reduced kernel mean embedding summarises a set of feature vectors x_1..x_n (inputs
embedded by the frozen base) by m weighted points: Φ = Σ_j β_j k(z_j, ·) close, in MMD, to
the empirical kernel mean (1/n) Σ_i k(x_i, ·), with the RBF kernel k(a, b) = exp(−γ‖a − b‖²).

Fitting: k-means centres initialise z; then, ``steps`` times, β is the least-squares optimum
for the current z (a ridge-stabilised linear solve) and z takes one Adam step down the MMD
gradient (closed form). The best (z, β) seen is kept. Learnwares are ranked by the MMD² between the user's
RKME and theirs: smaller is closer.

γ must be the same for every RKME that is compared. The default, 0.03, is the median
heuristic 1/median‖x_i − x_j‖² (≈ 1/33) measured on mean-pooled all-MiniLM-L6-v2 features of
750 inputs from five tasks (sst2, trec, ag_news, sms_spam, tweet_emotion); for another base,
pick one with :func:`median_gamma` on a sample of the market's inputs and use it everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from app.ml.encoders import Encoder, embed_texts
from app.ml.errors import IncompatibleSpec, InvalidInput

DEFAULT_GAMMA = 0.03
RIDGE = 1e-8


@dataclass(frozen=True)
class Rkme:
    """m points ``z`` (m, d) with weights ``beta`` (m,) under the RBF kernel of ``gamma``."""

    z: np.ndarray
    beta: np.ndarray
    gamma: float

    @property
    def dim(self) -> int:
        return int(self.z.shape[1])


@dataclass(frozen=True)
class RkmeMatch:
    id: int
    mmd2: float


def rbf_kernel(a: np.ndarray, b: np.ndarray, gamma: float) -> np.ndarray:
    """k(a_i, b_j) = exp(−γ‖a_i − b_j‖²), float64 (len(a), len(b))."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    sq = (a64**2).sum(1)[:, None] + (b64**2).sum(1)[None, :] - 2.0 * a64 @ b64.T
    return np.exp(-gamma * np.maximum(sq, 0.0))


def median_gamma(features: np.ndarray, max_points: int = 1000, seed: int = 0) -> float:
    """The median heuristic: 1 / median of squared pairwise distances (on a seeded sample)."""
    x = _check_features(features)
    if len(x) > max_points:
        x = x[np.random.default_rng(seed).choice(len(x), size=max_points, replace=False)]
    sq = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)[np.triu_indices(len(x), 1)]
    median = float(np.median(sq)) if sq.size else 0.0
    if median <= 0:
        raise InvalidInput("features are all identical: no distance to set a kernel width from")
    return 1.0 / median


def _check_features(features: np.ndarray) -> np.ndarray:
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise InvalidInput(f"features must be a non-empty (n, d) matrix, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise InvalidInput("features have NaN or infinite values")
    return x


def _objective_and_grad(
    z: np.ndarray, beta: np.ndarray, x: np.ndarray, gamma: float
) -> tuple[float, np.ndarray]:
    """MMD² without its constant data term, βᵀK_zzβ − (2/n)·βᵀK_zx·1, and its gradient in z."""
    k_zz = rbf_kernel(z, z, gamma)
    k_zx = rbf_kernel(z, x, gamma)
    value = float(beta @ k_zz @ beta - 2.0 * (beta @ k_zx).mean())
    pair = np.outer(beta, beta) * k_zz
    data = beta[:, None] * k_zx / x.shape[0]
    grad = -4.0 * gamma * (pair.sum(1)[:, None] * z - pair @ z) + 4.0 * gamma * (
        data.sum(1)[:, None] * z - data @ x
    )
    return value, grad


def _best_beta(z: np.ndarray, x: np.ndarray, gamma: float) -> np.ndarray:
    """argmin_β MMD² for fixed z: (K_zz + λI) β = K_zx 1/n."""
    k_zz = rbf_kernel(z, z, gamma)
    rhs = rbf_kernel(z, x, gamma).mean(axis=1)
    return np.linalg.solve(k_zz + RIDGE * np.eye(len(z)), rhs)


def mmd2_to_data(rkme: Rkme, features: np.ndarray) -> float:
    """MMD² between an RKME and the empirical kernel mean of ``features``."""
    x = _check_features(features)
    if x.shape[1] != rkme.dim:
        raise IncompatibleSpec(f"features have {x.shape[1]} dimensions, the RKME {rkme.dim}")
    value = (
        rkme.beta @ rbf_kernel(rkme.z, rkme.z, rkme.gamma) @ rkme.beta
        - 2.0 * (rkme.beta @ rbf_kernel(rkme.z, x, rkme.gamma)).mean()
        + rbf_kernel(x, x, rkme.gamma).mean()
    )
    return max(float(value), 0.0)


def fit_rkme(
    features: np.ndarray,
    m: int = 100,
    steps: int = 30,
    seed: int = 0,
    *,
    gamma: float = DEFAULT_GAMMA,
    step_size: float = 0.05,
) -> Rkme:
    """Reduced set of ``m`` points (k-means init, then alternate β solve / Adam step on z).

    ``step_size`` is Adam's learning rate in units of the kernel length 1/√(2γ) spread over the
    coordinates. With n ≤ m inputs the RKME is the data itself with β = 1/n (MMD² = 0).
    """
    x = _check_features(features)
    if m < 1 or steps < 0 or gamma <= 0:
        raise InvalidInput(f"need m >= 1, steps >= 0 and gamma > 0; got m={m}, steps={steps}, gamma={gamma}")
    n, d = x.shape
    if n <= m:
        return Rkme(z=x.copy(), beta=np.full(n, 1.0 / n), gamma=float(gamma))
    # Small dense problems: one BLAS thread is faster than contending ones, and reproducible.
    with threadpool_limits(limits=1):
        z = KMeans(n_clusters=m, n_init=1, random_state=seed).fit(x).cluster_centers_.astype(np.float64)
        lr = step_size / np.sqrt(2.0 * gamma * d)
        moment, velocity = np.zeros_like(z), np.zeros_like(z)
        best: tuple[float, np.ndarray, np.ndarray] | None = None
        for step in range(steps + 1):
            beta = _best_beta(z, x, gamma)
            value, grad = _objective_and_grad(z, beta, x, gamma)
            if best is None or value < best[0]:
                best = (value, z.copy(), beta)
            if step == steps:
                break
            # Adam (β1 = 0.9, β2 = 0.999) on z.
            moment = 0.9 * moment + 0.1 * grad
            velocity = 0.999 * velocity + 0.001 * grad**2
            t = step + 1
            z = z - lr * (moment / (1 - 0.9**t)) / (np.sqrt(velocity / (1 - 0.999**t)) + 1e-12)
    assert best is not None
    return Rkme(z=best[1], beta=best[2], gamma=float(gamma))


def rkme_mmd2(a: Rkme, b: Rkme) -> float:
    """MMD² between two RKMEs of the same kernel: ‖Φ_a − Φ_b‖² in the RKHS."""
    if not np.isclose(a.gamma, b.gamma, rtol=1e-9, atol=0.0):
        raise IncompatibleSpec(
            f"RKMEs of different kernels (gamma {a.gamma} vs {b.gamma}) are not comparable"
        )
    if a.dim != b.dim:
        raise IncompatibleSpec(f"RKMEs of {a.dim} and {b.dim} dimensions are not comparable")
    value = (
        a.beta @ rbf_kernel(a.z, a.z, a.gamma) @ a.beta
        + b.beta @ rbf_kernel(b.z, b.z, a.gamma) @ b.beta
        - 2.0 * a.beta @ rbf_kernel(a.z, b.z, a.gamma) @ b.beta
    )
    return max(float(value), 0.0)


def rank_rkme(query: Rkme, specs: Mapping[int, Rkme], k: int | None = None) -> list[RkmeMatch]:
    """Rank RKMEs by MMD² to ``query``, closest first (ties by id)."""
    matches = sorted(
        (RkmeMatch(i, rkme_mmd2(query, r)) for i, r in specs.items()), key=lambda m: (m.mmd2, m.id)
    )
    return matches[:k] if k is not None else matches


def rkme_of_texts(
    encoder: Encoder,
    texts: Sequence[str],
    m: int = 100,
    steps: int = 30,
    seed: int = 0,
    *,
    gamma: float = DEFAULT_GAMMA,
    max_tokens: int = 128,
) -> Rkme:
    """Embed ``texts`` with the frozen base (mean pooling) and fit their RKME."""
    features = embed_texts(encoder, texts, max_tokens=max_tokens).numpy()
    return fit_rkme(features, m, steps, seed, gamma=gamma)
