"""The FAISS index: cosine ranking, ids kept, idempotent adds, persistence, bad queries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.ml.errors import IncompatibleSpec
from app.ml.identify import SpecIndex, rank_specs


def test_ranks_by_cosine_and_keeps_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 16)).astype(np.float32)
    ids = np.arange(1000, 1050)
    index = SpecIndex("space", 16)
    index.add(ids, vectors * rng.uniform(0.1, 10, size=(50, 1)))  # scale must not matter
    query = vectors[7] + 0.01 * rng.normal(size=16)
    matches = index.search(query, k=5)
    assert matches[0].id == 1007
    expected = sorted(
        (
            (float(v @ query / np.linalg.norm(v) / np.linalg.norm(query)), int(i))
            for v, i in zip(vectors, ids, strict=True)
        ),
        reverse=True,
    )[:5]
    assert [m.id for m in matches] == [i for _, i in expected]
    assert matches[0].score == pytest.approx(expected[0][0], abs=1e-5)

    index.add([1007], vectors[7:8])  # re-adding replaces: never indexed twice
    assert len(index) == 50
    assert index.remove([1007]) == 1
    assert index.search(query, k=1)[0].id != 1007
    assert 1007 not in {m.id for m in index.search(query, k=3, exclude={1000})}

    index.save(tmp_path / "idx.faiss")
    again = SpecIndex.load(tmp_path / "idx.faiss", "space", 16)
    assert len(again) == 49 and again.ids() == index.ids()


def test_refuses_other_spaces_shapes_and_nan() -> None:
    index = SpecIndex("space-a", 4)
    with pytest.raises(IncompatibleSpec, match="space"):
        index.add([1], np.ones((1, 4)), space_id="space-b")
    with pytest.raises(IncompatibleSpec, match="needs 4"):
        index.search(np.ones(5))
    with pytest.raises(IncompatibleSpec, match="NaN"):
        index.search(np.array([1, np.nan, 0, 0]))
    assert index.search(np.ones(4)) == []


def test_rank_specs_small_sets() -> None:
    specs = {1: np.array([1.0, 0, 0]), 2: np.array([0, 1.0, 0]), 3: np.array([1.0, 1.0, 0])}
    assert [m.id for m in rank_specs(np.array([1.0, 0.1, 0]), specs)] == [1, 3, 2]


def test_benchmark_ties_are_runs_of_equal_scores_in_list_order() -> None:
    """A label-tier re-ranking is not sorted by score: its top-1 ties only with equal neighbours
    (an earlier bug counted every learnware scoring above the top-1 as tied with it)."""
    from app.bench.identification import _tie_block
    from app.ml.identify import Match

    reranked = [Match(1, 0.5), Match(2, 0.9), Match(3, 0.9), Match(4, 0.5)]
    assert _tie_block(reranked, 0) == (0, 1)
    assert _tie_block(reranked, 2) == (1, 2)
    assert _tie_block(reranked, 3) == (3, 1)
    assert _tie_block([Match(1, 0.7), Match(2, 0.7), Match(3, 0.7)], 1) == (0, 3)
