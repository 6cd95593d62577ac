"""A spec-only task's close matches, ordered by how much the others bear them out (`app.ml.agreement`)."""

from __future__ import annotations

import numpy as np
import pytest

from app.ml.agreement import (
    MIN_PEERS,
    agreement_chosen,
    agreement_scores,
    kappa,
    pooled_inputs,
    user_answers,
)
from app.ml.ranking import Candidate, ShotScore, by_tier, rank_for_task


def _answers(truth: np.ndarray, accuracy: float, seed: int, n_labels: int = 2) -> np.ndarray:
    """Answers right on a share ``accuracy`` of ``truth``, wrong at random elsewhere."""
    rng = np.random.default_rng(seed)
    wrong = rng.random(len(truth)) >= accuracy
    out = truth.copy()
    out[wrong] = (truth[wrong] + rng.integers(1, n_labels, wrong.sum())) % n_labels
    return out


def test_kappa_is_one_for_the_same_answers_and_zero_for_chance_agreement() -> None:
    truth = np.random.default_rng(0).integers(0, 3, 400)
    assert kappa(truth, truth, 3) == pytest.approx(1.0)
    # A model that always answers one class agrees with others only by chance: κ 0, however
    # often that class is right.
    assert kappa(np.zeros(400, dtype=np.int64), truth, 3) == pytest.approx(0.0)
    assert abs(kappa(np.random.default_rng(1).integers(0, 3, 400), truth, 3)) < 0.1
    # Two that only ever give one and the same answer tell nothing.
    assert kappa(np.ones(5, dtype=np.int64), np.ones(5, dtype=np.int64), 2) == 0.0
    # No answer (−1) is one more answer, never one of the labels.
    assert kappa(np.array([-1, -1, 0, 1]), np.array([0, 1, 0, 1]), 2) < 1.0
    with pytest.raises(ValueError, match="shapes"):
        kappa(np.zeros(3, dtype=np.int64), np.zeros(4, dtype=np.int64), 2)


def test_the_peer_that_learnt_least_agrees_least() -> None:
    truth = np.random.default_rng(7).integers(0, 2, 600)
    answered = {
        1: _answers(truth, 0.92, 1),  # good
        2: _answers(truth, 0.85, 2),  # trained on noisy labels
        3: _answers(truth, 0.62, 3),  # trained on a twentieth of the data
        4: np.random.default_rng(4).integers(0, 2, 600),  # random labels
    }
    scores = agreement_scores(answered, 2)
    assert sorted(scores, key=lambda i: -scores[i]) == [1, 2, 3, 4]
    assert abs(scores[4]) < 0.1
    # Fewer than three peers say nothing: two agree with each other exactly as much both ways.
    assert agreement_scores({1: answered[1], 2: answered[2]}, 2) == {}
    assert MIN_PEERS == 3


def test_peers_answer_by_name_and_copies_of_one_spec_take_one_place() -> None:
    rng = np.random.default_rng(0)
    spec = {i: np.sign(rng.standard_normal(64)) for i in range(1, 8)}
    names = ("ham", "spam")
    ordered = [
        Candidate(1, 0.5, names),
        Candidate(2, 0.5, names),  # a copy of 1's spec
        Candidate(3, 0.4, ("spam", "ham", "other")),  # answers by name, restricted
        Candidate(4, 0.6, ("a", "b")),  # would need a label map: not a peer
        Candidate(5, 0.3, names),
        Candidate(6, 0.2, names),
    ]
    vectors = spec | {2: spec[1]}
    assert agreement_chosen(ordered, list(names), vectors, k=5) == [1, 3, 5, 6]
    assert agreement_chosen(ordered, list(names), vectors, k=3) == [1, 3, 5]
    # Fewer than three peers: none.
    assert agreement_chosen(ordered[:4], list(names), vectors, k=5) == []


def test_pooled_inputs_take_the_first_of_each_peer_once() -> None:
    assert pooled_inputs([["a", "b", "c"], ["b", "d"], ["e"]], per=2) == ["a", "b", "d", "e"]


def test_a_peer_with_more_classes_is_read_through_its_map_by_name() -> None:
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.4, 0.1]])  # classes "other", "spam", "ham"
    assert user_answers(np.array([2, 0]), probs, ["ham", "spam"], ["other", "spam", "ham"]).tolist() == [0, 1]
    # Without probabilities an answer outside the user's labels is no answer.
    assert user_answers(np.array([2, 0]), None, ["ham", "spam"], ["other", "spam", "ham"]).tolist() == [0, -1]
    with pytest.raises(ValueError, match="by name"):
        user_answers(np.array([0]), None, ["ham", "spam"], ["a", "b"])


def test_agreement_orders_the_close_matches_and_says_so() -> None:
    user = ["ham", "spam"]
    ordered = by_tier(
        [
            Candidate(1, 0.34, ("ham", "spam")),  # the weak one, a hair closer by its spec
            Candidate(2, 0.32, ("ham", "spam")),
            Candidate(3, 0.30, ("ham", "spam")),
            Candidate(4, 0.10, ("ham", "spam")),  # not a peer: keeps its place after them
            Candidate(5, 0.90, ("a", "b")),
        ],
        user,
    )
    agreement = {1: 0.21, 2: 0.64, 3: 0.58}
    ranked = rank_for_task(ordered, user, agreement=agreement)
    assert [r.id for r in ranked] == [2, 3, 1, 4, 5]
    first = ranked[0]
    assert first.agreement == 0.64 and "κ 0.64" in first.reason(0, user, ["ham", "spam"])
    assert first.fields(user, ["ham", "spam"])["agreement"] == 0.64
    assert ranked[3].agreement is None and ranked[3].fields(user, ["ham", "spam"])["agreement"] is None
    # It never moves what a shot check decided: a checked match keeps its place and no κ.
    shots = {1: ShotScore(0.9, 0.8, -0.2)}
    checked = rank_for_task(ordered, user, shots=shots, agreement=agreement)
    assert [r.id for r in checked] == [1, 2, 3, 4, 5] and checked[0].agreement is None
