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


def test_learnwares_of_the_users_label_set_come_first_in_cosine_order() -> None:
    from app.ml.identify import Match, label_compatible_first

    ranking = [Match(1, 0.9), Match(2, 0.8), Match(3, 0.7), Match(4, 0.6)]
    names = {1: ["negative", "positive"], 2: ["Ham", "spam "], 3: ["spam", "ham"], 4: ["ham", "spam", "x"]}
    reranked = label_compatible_first(ranking, names, ["ham", "spam"])
    assert [m.id for m in reranked] == [2, 3, 1, 4]
    # Nobody speaks the user's labels: learnwares with as many classes come first, in cosine order.
    assert label_compatible_first(ranking, names, ["a", "b"]) == ranking
    assert [m.id for m in label_compatible_first(ranking, names, ["a", "b", "c"])] == [4, 1, 2, 3]


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


def test_shot_check_reorders_only_the_checked_head_by_accuracy_then_confidence() -> None:
    from app.ml.identify import Match, ShotScore, shot_checked

    ranking = [Match(i, 1.0 - i / 10) for i in range(1, 8)]
    scores = {
        1: ShotScore(0.5, 0.5),
        2: ShotScore(0.9, 0.7),
        3: None,
        4: ShotScore(0.9, 0.8),
        5: ShotScore(0.7, 0.6),
        6: ShotScore(1.0, 1.0),
    }
    order = [m.id for m in shot_checked(ranking, scores, k=5)]
    # 2 and 4 tie at 0.9 accuracy: 4 gave the true labels more probability; 3 could not be
    # checked; 6 and 7 lie beyond k.
    assert order == [4, 2, 5, 1, 3, 6, 7]
    # Equal scores keep their cosine order.
    assert [m.id for m in shot_checked(ranking, {1: ShotScore(0.5, 0.5), 2: ShotScore(0.5, 0.5)})] == list(
        range(1, 8)
    )
    assert shot_checked(ranking, {}, k=5) == ranking


def test_shot_score_reads_probabilities_through_the_label_map() -> None:
    import numpy as np
    import pytest

    from app.ml.identify import ShotScore, shot_score

    # The model's classes are (b, a); the user's (a, b): mapping[model class] = user class.
    mapping = np.array([1, 0])
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    predicted = probs.argmax(axis=1)
    labels = np.array([1, 0, 0, 0])  # user ids: b, a, a, a
    score = shot_score(predicted, probs, labels, mapping)
    # Right on examples 0, 1 and 3; true-label probabilities 0.9, 0.8, 0.4, 0.7.
    assert score.accuracy == 0.75
    assert score.confidence == pytest.approx((0.9 + 0.8 + 0.4 + 0.7) / 4)
    # A model without probabilities is as confident as it is accurate.
    assert shot_score(predicted, None, labels, mapping) == ShotScore(0.75, 0.75)
    with pytest.raises(ValueError, match="probabilities of shape"):
        shot_score(predicted, probs[:, :1], labels, mapping)


def test_best_label_map_finds_the_renaming_that_fits_the_examples() -> None:
    import numpy as np

    from app.ml.identify import best_label_map

    # The model says 0/1/2 where the user says 2/0/1; one example disagrees.
    predicted = np.array([0, 0, 1, 1, 2, 2, 2])
    labels = np.array([2, 2, 0, 0, 1, 1, 0])
    mapping, accuracy = best_label_map(predicted, labels, 3)
    assert mapping.tolist() == [2, 0, 1]
    assert accuracy == 6 / 7
