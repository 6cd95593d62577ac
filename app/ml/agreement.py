"""Which of a few close matches the others bear out, where the dock has no examples to check on.

A spec-only task (the user fitted the spec on their own machine and kept the examples) gets no
shot check in the dock, so the spec's cosine decides, and between learnwares of one task it
barely tells a good model from a weak one: a trec user's spec scored 0.336 against a model
trained on a twentieth of the data (37% right on the test split) and 0.324 against the good one
(72%). What the dock does hold is the models and the inputs each declared. So it runs the first
few matches that answer the user's labels by name (`agreement_chosen`: as many as the shot check
runs, near-identical specs taking one place) on their pooled declared inputs (`pooled_inputs`),
and scores each by its mean chance-corrected agreement with the others (`agreement_scores`).

Why that says something: models that learnt the task agree with one another where they are
right, and each errs in its own way; a model that learnt less agrees less with all of them. The
agreement is Cohen's κ, not the share of equal answers: a model that answers one class always
agrees by chance with every model that answers it often, and κ gives it 0. Near-identical specs
(copies of one model, a flood) take one place among the peers, so k copies cannot outvote the
others. The score orders only these matches, among themselves (`ranking.rank_for_task`).

A task with examples is checked on them, and the same score weighs in: where at least three
checked matches did better than chance on the user's examples, the first five are run on their
pooled declared inputs through the label maps their check chose (`checked_peers`,
`mapped_answers`), and each one's κ is added to its score on the examples
(`ranking.weighed_by_agreement`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from app.ml.label_maps import LabelMap, Tier, answers, map_by_name, tier_of
from app.ml.ranking import SHOT_CHECK_K, Candidate, Ranked, choose_checked

AGREEMENT_INPUTS = 48
"""How many of each peer's declared inputs are pooled (the first ones, as validation runs them):
with five peers, 240 texts for every peer to answer, about four times what a shot check of 64
examples costs the same five models (a cost cap, not a choice on any benchmark)."""

MIN_PEERS = 3
"""Fewer peers say nothing: two models agree with each other exactly as much as the other way round."""


def agreement_chosen(
    ordered: Sequence[Candidate],
    user_names: Sequence[str],
    vectors: Mapping[int, np.ndarray],
    k: int,
) -> list[int]:
    """The peers: the first ``k`` of ``ordered`` (the dock's order) that answer
    the user's labels by name, one of each group of near-identical specs (`ranking.choose_checked`).
    Empty when fewer than `MIN_PEERS` qualify."""
    named = [c for c in ordered if tier_of(user_names, c.label_names) == Tier.BY_NAME]
    chosen = choose_checked(named, user_names, vectors, k)
    return chosen if len(chosen) >= MIN_PEERS else []


def pooled_inputs(declared: Sequence[Sequence[str]], per: int = AGREEMENT_INPUTS) -> list[str]:
    """The first ``per`` declared inputs of each peer, in the peers' order, each text once."""
    seen: set[str] = set()
    pooled: list[str] = []
    for inputs in declared:
        for text in list(inputs)[:per]:
            if text not in seen:
                seen.add(text)
                pooled.append(text)
    return pooled


def user_answers(
    predicted: np.ndarray, probs: np.ndarray | None, user_names: Sequence[str], model_names: Sequence[str]
) -> np.ndarray:
    """A peer's answers as the user's label ids, through its map by name (restricted to the user's
    labels where it has more classes); a model without probabilities that answers a class outside
    them gives no answer, −1."""
    label_map = map_by_name(user_names, model_names)
    if label_map is None:
        raise ValueError(f"labels {list(model_names)} do not answer {list(user_names)} by name")
    return mapped_answers(predicted, probs, label_map)


def mapped_answers(predicted: np.ndarray, probs: np.ndarray | None, label_map: LabelMap) -> np.ndarray:
    """A model's answers (its own class ids, and probabilities where it gives them) as the user's
    label ids through ``label_map``, the one its check chose; −1 where it answers a class outside
    the map and gives no probabilities to restrict."""
    if probs is not None and np.asarray(probs).shape[1:] != (label_map.n_model_classes,):
        raise ValueError(
            f"probabilities of shape {np.asarray(probs).shape} for a map of {label_map.n_model_classes} classes"
        )
    user_pred, _ = answers(predicted, probs, label_map)
    return np.asarray(user_pred, dtype=np.int64)


def checked_peers(ranked: Sequence[Ranked], k: int = SHOT_CHECK_K) -> list[int]:
    """The first ``k`` checked matches better than chance, whose agreement weighs in on their order
    (`ranking.weighed_by_agreement`), in their order; empty where fewer than `MIN_PEERS` were
    checked or the best is not first. ``ranked``: `rank_for_task`'s order before any agreement. At
    most ``k`` (the shot check's width where a match answers by name) whatever the check ran: a
    task no match names is checked on 20, and 20 models on 20 declared inputs' worth each would
    cost sixteen times the five's 240 texts (a cost cap, not a choice on any benchmark)."""
    checked = [r for r in ranked if r.checked and r.beats_chance and r.label_map is not None][:k]
    if len(checked) < MIN_PEERS or checked[0] is not ranked[0]:
        return []
    return [r.id for r in checked]


def kappa(a: np.ndarray, b: np.ndarray, n_labels: int) -> float:
    """Cohen's κ of two answer vectors over ``n_labels`` labels (−1, no answer, is one more answer):
    1 for the same answers, 0 for agreement no better than their answer rates give by chance."""
    a = np.where(np.asarray(a) < 0, n_labels, np.asarray(a))
    b = np.where(np.asarray(b) < 0, n_labels, np.asarray(b))
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"answers of shapes {a.shape} and {b.shape}")
    observed = float(np.mean(a == b))
    rate_a = np.bincount(a, minlength=n_labels + 1) / a.size
    rate_b = np.bincount(b, minlength=n_labels + 1) / b.size
    expected = float(rate_a @ rate_b)
    if expected >= 1.0 - 1e-12:  # both always give one and the same answer: nothing to go by
        return 0.0
    return (observed - expected) / (1.0 - expected)


def agreement_scores(answers_by_id: Mapping[int, np.ndarray], n_labels: int) -> dict[int, float]:
    """Each peer's mean κ with the others on the same inputs (`kappa`); {} with fewer than
    `MIN_PEERS`."""
    ids = list(answers_by_id)
    if len(ids) < MIN_PEERS:
        return {}
    pair = {
        (i, j): kappa(answers_by_id[i], answers_by_id[j], n_labels)
        for x, i in enumerate(ids)
        for j in ids[x + 1 :]
    }
    return {
        i: float(np.mean([pair[(i, j)] if (i, j) in pair else pair[(j, i)] for j in ids if j != i]))
        for i in ids
    }
