"""The scale benchmark's market: lineage, flip grades, near-duplicates and mixtures as stated."""

from __future__ import annotations

import numpy as np

from app.bench.market_sim import DUPLICATE_FLIP, MODEL_FLIP, RealSpecs, generate_market
from app.bench.scale import realism_check
from app.ml.binary_index import cosine_from_hamming, hamming

DIM = 8192


def roots(tasks: int = 4) -> RealSpecs:
    """Stand-ins for the real task specs (the benchmark fits those with the real base)."""
    rng = np.random.default_rng(0)
    n = tasks * 5
    bits = np.packbits(rng.random((n, DIM)) < 0.5, axis=-1)
    return RealSpecs("space", DIM, [f"t{i // 5}" for i in range(n)], [i % 5 for i in range(n)], bits)


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return cosine_from_hamming(hamming(a, b), DIM)


def test_the_market_grows_from_the_roots_as_stated() -> None:
    real = roots()
    out = np.empty((4000, DIM // 8), dtype=np.uint8)
    market = generate_market(real, 4000, out, seed=1, say=lambda _: None)
    kinds = np.bincount(market.kind, minlength=3) / 4000
    assert abs(kinds[0] - 0.6) < 0.05 and abs(kinds[1] - 0.3) < 0.05 and abs(kinds[2] - 0.1) < 0.05
    # Models descend from market roots only (draws 0..2); the query draws (3, 4) stay unseen.
    assert set(np.asarray(real.seeds)[market.parent]) <= {0, 1, 2}
    models = np.flatnonzero(market.kind == 0)
    to_root = cos(out[models], real.bits[market.parent[models]])
    lo, hi = 1 - 2 * MODEL_FLIP[1], 1 - 2 * MODEL_FLIP[0]
    assert to_root.min() > lo - 0.05 and to_root.max() < hi + 0.05 and to_root.std() > 0.05  # graded
    dups = np.flatnonzero(market.kind == 1)
    to_model = cos(out[dups], out[market.source[dups]])
    assert to_model.min() > 1 - 2 * DUPLICATE_FLIP[1] - 0.03 and to_model.max() < 1.0
    assert np.all(market.kind[market.source[dups]] == 0)
    mixes = np.flatnonzero(market.kind == 2)
    assert np.all(cos(out[mixes], out[market.source[mixes]]) > 0.3)  # half a parent or more
    # The same seed gives the same market.
    again = np.empty_like(out)
    generate_market(real, 4000, again, seed=1, say=lambda _: None)
    assert np.array_equal(out, again)


def test_the_realism_check_compares_with_the_roots() -> None:
    real = roots()
    out = np.empty((3000, DIM // 8), dtype=np.uint8)
    market = generate_market(real, 3000, out, seed=2, say=lambda _: None)
    check = realism_check(real, out, market)
    assert set(check["real"]) == {"same task (two draws)", "unrelated tasks"}
    simulated = check["simulated"]
    assert 0.08 < simulated["same draw"]["mean"] < 0.18  # as two real draws of one task agree
    assert abs(simulated["unrelated"]["mean"]) < 0.02 and simulated["near-duplicate"]["mean"] > 0.85
