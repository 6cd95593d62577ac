"""A spec-only task's close matches ordered by how much the others bear them out, and the shot
check's first matches weighed by it (`app.ml.agreement`)."""

from __future__ import annotations

import numpy as np
import pytest

from app.ml.agreement import (
    MIN_PEERS,
    agreement_chosen,
    agreement_scores,
    checked_peers,
    kappa,
    mapped_answers,
    pooled_inputs,
    user_answers,
)
from app.ml.label_maps import map_by_examples
from app.ml.ranking import AGREEMENT_WEIGHT, Candidate, ShotScore, by_tier, rank_for_task


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
    # A match checked alone (no agreement of its own) keeps its place and is not marked weighed.
    shots = {1: ShotScore(0.9, 0.8, -0.2)}
    checked = rank_for_task(ordered, user, shots=shots, agreement={2: 0.64, 3: 0.58})
    assert [r.id for r in checked] == [1, 2, 3, 4, 5] and not checked[0].weighed


def _shot(log_likelihood: float, accuracy: float = 0.75, map_cost: float = 0.0) -> ShotScore:
    return ShotScore(accuracy, float(np.exp(log_likelihood)), log_likelihood, map_cost=map_cost)


def test_the_checked_matches_agreement_is_added_to_their_scores() -> None:
    user = ["negative", "positive"]
    names = ("negative", "positive")
    ordered = by_tier([Candidate(i, 0.3 - 0.01 * i, names) for i in (1, 2, 3, 4, 5)], user)
    shots = {
        1: _shot(-0.20),  # best on the examples, but the others bear it out least (a weak twin)
        2: _shot(-0.25),  # a few hundredths behind, and borne out most
        3: _shot(-0.50, map_cost=0.1),  # far behind: its agreement cannot make up for it
        4: _shot(-0.90, accuracy=0.25),  # no better than chance (log 1/2 = -0.69): not a peer
    }
    plain = rank_for_task(ordered, user, shots=shots)
    assert [r.id for r in plain] == [1, 2, 3, 5, 4] and not any(r.weighed for r in plain)
    # The peers: the checked matches better than chance, the best first, at most k of them.
    assert checked_peers(plain) == [1, 2, 3]
    assert checked_peers(plain, k=2) == []  # too few to vote
    agreement = {1: 0.12, 2: 0.58, 3: 0.66}
    ranked = rank_for_task(ordered, user, shots=shots, agreement=agreement)
    # -0.20 + 0.12 = -0.08 < -0.25 + 0.58 = 0.33; -0.60 + 0.66 = 0.06 between them.
    assert AGREEMENT_WEIGHT == 1.0
    assert [r.id for r in ranked] == [2, 3, 1, 5, 4]
    assert [r.weighed for r in ranked] == [True, True, True, False, False]
    assert ranked[0].weighed_score == pytest.approx(0.33) and ranked[3].weighed_score is None
    why = ranked[0].reason(8, user, list(names))
    assert "κ 0.58, which is added to its score: -0.25 + 0.58 = 0.33" in why
    assert ranked[0].fields(user, list(names), 8)["agreement_weighed"] is True
    assert "added to its score" not in ranked[3].reason(8, user, list(names))
    # Agreement alike for all changes nothing but the marks.
    kept = rank_for_task(ordered, user, shots=shots, agreement={1: 0.5, 2: 0.5, 3: 0.5})
    assert [r.id for r in kept] == [1, 2, 3, 5, 4] and all(r.weighed for r in kept[:3])
    # One that could not be run counts at the others' mean κ, and is not marked.
    missing = rank_for_task(ordered, user, shots=shots, agreement={2: 0.58, 3: 0.66})
    # 1: -0.20 + 0.62 (the mean of 0.58 and 0.66) = 0.42, above 2's 0.33.
    assert [r.id for r in missing] == [1, 2, 3, 5, 4]
    assert not missing[0].weighed and missing[1].weighed


def test_too_few_checked_matches_need_no_agreement() -> None:
    user = ["negative", "positive"]
    names = ("negative", "positive")
    ordered = by_tier([Candidate(i, 0.3 - 0.01 * i, names) for i in (1, 2, 3)], user)
    two = {1: _shot(-0.2), 2: _shot(-0.3)}
    assert checked_peers(rank_for_task(ordered, user, shots=two)) == []  # fewer than MIN_PEERS checked
    # However many were checked (20 where no match names the task's labels), the first k vote.
    many = by_tier([Candidate(i, 0.3 - 0.01 * i, names) for i in range(1, 9)], user)
    scores = {i: _shot(-0.1 - 0.02 * i) for i in range(1, 9)}
    ranked = rank_for_task(many, user, shots=scores)
    assert checked_peers(ranked) == [r.id for r in ranked[:5]] and len(ranked) == 8
    # Only those with an agreement score are reordered; the rest follow in score order.
    weighed = rank_for_task(many, user, shots=scores, agreement={1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 5: 0.5})
    assert [r.id for r in weighed] == [5, 4, 3, 2, 1, 6, 7, 8]


def test_a_checked_peer_answers_through_the_map_its_check_chose() -> None:
    # A three-class model mapped by the examples onto the user's two labels: its class 2 is the
    # user's "negative", class 0 the user's "positive"; class 1 is outside the map.
    label_map = map_by_examples(np.array([2, 2, 0, 0]), None, np.array([0, 0, 1, 1]), n_user=2, n_model=3)
    assert mapped_answers(np.array([2, 0, 1]), None, label_map).tolist() == [0, 1, -1]
    probs = np.array([[0.2, 0.1, 0.7], [0.6, 0.3, 0.1], [0.3, 0.6, 0.1]])
    assert mapped_answers(np.array([2, 0, 1]), probs, label_map).tolist() == [0, 1, 1]
    with pytest.raises(ValueError, match="probabilities"):
        mapped_answers(np.array([0]), np.array([[0.5, 0.5]]), label_map)
