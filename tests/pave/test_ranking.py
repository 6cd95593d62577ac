"""The dock's ranking rules for a user's task (`app.ml.ranking`) and its label maps (`app.ml.label_maps`):
tiers, label maps, the shot check's candidates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.ml.label_maps import (
    FLOOR_SHARE_OF_CHANCE,
    LabelMap,
    Tier,
    answers,
    best_numbering,
    choose_label_map,
    code_order,
    examples_may_map,
    labels_are_codes,
    map_by_examples,
    map_by_meaning,
    map_by_name,
    map_cost,
    names_log_prior,
    names_map_nats,
    reading_nats,
    tier_of,
)
from app.ml.ranking import (
    Candidate,
    Realignment,
    ShotScore,
    aligned_score,
    best_alignment,
    by_tier,
    check_count,
    check_on_examples,
    choose_checked,
    held_out_score,
    near_copies,
    originals_first,
    rank_for_task,
    realignments,
    searched_realignments,
    shot_score,
    with_alignment,
    with_searched,
)


def test_tiers_come_from_what_a_learnware_can_answer() -> None:
    user = ["Negative", "positive "]
    assert tier_of(user, ["positive", "negative"]) == Tier.BY_NAME
    assert tier_of(user, ["negative", "neutral", "positive"]) == Tier.BY_NAME  # a superset answers
    assert tier_of(user, ["ham", "spam"]) == Tier.LABEL_MAP
    assert tier_of(user, ["a", "b", "c"]) == Tier.LABEL_MAP
    assert tier_of(["a", "b", "c"], ["a", "b"]) == Tier.CANNOT  # fewer classes: cannot serve
    assert tier_of(["card_arrival", "top-up"], ["Card arrival", "top up", "refund"]) == Tier.BY_NAME


def test_by_tier_orders_tiers_then_cosine_and_copies_oldest_first() -> None:
    cands = [
        Candidate(1, 0.9, ("ham", "spam")),
        Candidate(2, 0.2, ("negative", "positive")),
        Candidate(3, 0.95, ("a", "b", "c")),
        Candidate(9, 0.5, ("negative", "neutral", "positive")),
        Candidate(5, 0.5, ("negative", "neutral", "positive")),
        Candidate(4, 0.99, ("x",) * 1),
    ]
    order = [c.id for c in by_tier(cands, ["negative", "positive"])]
    assert order == [5, 9, 2, 3, 1, 4]


def test_codes_carry_no_meaning() -> None:
    assert labels_are_codes(["0", "1"]) and labels_are_codes(["LABEL_0", "LABEL_1", "label-2"])
    assert labels_are_codes(["class 1", "Class 2"]) and labels_are_codes(["a", "b"])
    assert not labels_are_codes(["ham", "spam"]) and not labels_are_codes(["0", "spam"])


def test_map_by_name_restricts_a_superset() -> None:
    label_map = map_by_name(["positive", "negative"], ["negative", "neutral", "positive"])
    assert label_map == LabelMap((2, 0), "names", 3)
    assert label_map.restricted
    assert label_map.names(["positive", "negative"], ["negative", "neutral", "positive"]) == {
        "positive": "positive",
        "negative": "negative",
    }
    assert map_by_name(["good", "bad"], ["negative", "positive"]) is None


def test_map_by_meaning_needs_a_clear_margin_and_no_codes() -> None:
    user, model = ["bad", "good"], ["negative", "positive"]
    clear = np.array([[0.6, 0.2], [0.25, 0.7]])
    assert map_by_meaning(user, model, clear) == LabelMap((0, 1), "meaning", 2)
    flipped = np.array([[0.2, 0.6], [0.7, 0.25]])
    assert map_by_meaning(user, model, flipped) == LabelMap((1, 0), "meaning", 2)
    unclear = np.array([[0.40, 0.39], [0.38, 0.40]])
    assert map_by_meaning(user, model, unclear) is None
    assert map_by_meaning(["0", "1"], model, clear) is None
    assert map_by_meaning(user, ["LABEL_0", "LABEL_1"], clear) is None
    with pytest.raises(ValueError, match="similarity of shape"):
        map_by_meaning(user, model, np.zeros((3, 2)))


def test_the_meaning_margin_is_per_label_moved_so_many_labels_do_not_dilute_it() -> None:
    """Forty renamed intents, each clearly its own (0.8 against 0.3 for every other name): any
    other map moves at least one label and loses at least 0.5 per label moved. Taken per user
    label, that margin was 1.0 / 40 = 0.025 and the meaning never decided a large label set."""
    n = 40
    clear = np.full((n, n), 0.3) + 0.5 * np.eye(n)
    user, model = [f"intent {i}" for i in range(n)], [f"the intent {i}" for i in range(n)]
    assert map_by_meaning(user, model, clear) == LabelMap(tuple(range(n)), "meaning", n)
    # A half of a larger model's classes, by meaning: each moved to an unused class loses 0.5.
    half = clear[::2]
    found = map_by_meaning(user[::2], model, half)
    assert found is not None and found.model_class == tuple(range(0, n, 2)) and found.restricted
    # One pair that is not clear (either way round as close) is enough to hand it to the examples.
    tied = clear.copy()
    tied[7, 8] = tied[8, 7] = 0.8
    assert map_by_meaning(user, model, tied) is None


def test_an_inverted_classifier_is_not_rescued_by_a_data_map_when_names_mean_something() -> None:
    """A spam filter trained on flipped labels says "ham" for spam. The user calls the classes
    "normal message" and "junk message": the names decide the map, and the model scores 0."""
    user, model = ["normal message", "junk message"], ["ham", "spam"]
    labels = np.array([0, 0, 1, 1])
    predicted = np.array([1, 1, 0, 0])  # inverted
    similarity = np.array([[0.3, 0.1], [0.15, 0.6]])
    label_map = choose_label_map(user, model, similarity=similarity, predicted=predicted, labels=labels)
    assert label_map is not None and label_map.how == "meaning" and label_map.model_class == (0, 1)
    assert shot_score(predicted, None, labels, label_map).accuracy == 0.0
    # With codes for names the data decides, and says how.
    coded = choose_label_map(["0", "1"], model, similarity=None, predicted=predicted, labels=labels)
    assert coded == LabelMap((1, 0), "examples", 2)
    assert shot_score(predicted, None, labels, coded).accuracy == 1.0
    assert "your examples" in coded.describe()


def test_a_map_not_by_name_is_spelt_out_and_one_the_examples_chose_between_meanings_is_flagged() -> None:
    """A sentiment model relabelled onto a spam user's "ham" / "spam" by their examples fits them
    and reads wrong: the reason names the pairs and says the names do not vouch for them. Codes,
    a map by meaning and one by name get no warning."""
    relabel = LabelMap((1, 0), "examples", 2)
    text = relabel.describe(["ham", "spam"], ["negative", "positive"])
    assert "its 'positive' is your 'ham', its 'negative' is your 'spam'" in text
    assert "check that the map fits your task" in text
    coded = relabel.describe(["0", "1"], ["negative", "positive"])
    assert "its 'positive' is your '0'" in coded and "check" not in coded
    meaning = LabelMap((0, 1), "meaning", 2).describe(["bad", "good"], ["negative", "positive"])
    assert "its 'negative' is your 'bad'" in meaning and "check" not in meaning
    assert LabelMap((0, 1), "names", 2).describe(["a", "b"], ["a", "b"]) == "labels matched by name"
    many = LabelMap(tuple(range(8)), "meaning", 8).describe(
        [f"u{i}x" for i in range(8)], [f"m{i}x" for i in range(8)]
    )
    assert many.count(" is your ") == 6 and many.endswith("…)")
    ranked = rank_for_task(
        [Candidate(1, 0.4, ("negative", "positive"))],
        ["ham", "spam"],
        maps={1: relabel},
        shots={1: ShotScore(0.9, 0.8, -0.3)},
    )
    assert "its 'positive' is your 'ham'" in ranked[0].reason(16, ["ham", "spam"], ["negative", "positive"])


def test_examples_pick_a_few_classes_of_a_larger_model_only_priced_by_the_names() -> None:
    """A question-type classifier's "entity" and "description" fit a few sentiment examples read
    as "bad" and "good". Unread names offer no map; read names price it (`map_cost`): what they
    argue against costs the uniform price and a bit, what they agree with costs little. A
    relabelling (as many classes) and codes on either side are the examples' to decide."""
    trec = ["abbreviation", "entity", "description", "human", "location", "number"]
    labels = np.array([0, 0, 1, 1])
    predicted = np.array([1, 1, 2, 2])
    assert choose_label_map(["bad", "good"], trec, predicted=predicted, labels=labels) is None
    assert not examples_may_map(["bad", "good"], trec)
    assert examples_may_map(["bad", "good"], trec, names_read=True)
    # The base's cosines of these names (MiniLM): nothing near "bad" or "good".
    against = np.array([[0.18, 0.14, 0.31, 0.22, 0.28, 0.24], [0.22, 0.15, 0.25, 0.27, 0.25, 0.24]])
    priced = choose_label_map(["bad", "good"], trec, similarity=against, predicted=predicted, labels=labels)
    assert priced == LabelMap((1, 2), "examples", 6)
    prior = names_log_prior(["bad", "good"], trec, against, temperature=0.05)
    assert prior is not None and np.allclose(np.exp(prior).sum(axis=1), 1.0)
    assert names_map_nats(priced, prior) > math.log(30)  # the names argue against it
    score = held_out_score(predicted, None, labels, priced, prior)
    assert score.map_cost == pytest.approx((math.log(30) + math.log(2)) / 4)
    # A sentiment learnware by name beats the lucky fit.
    sentiment = shot_score(labels, None, labels, LabelMap((0, 1), "names", 2))
    ranked = rank_for_task(
        [Candidate(1, 0.4, tuple(trec)), Candidate(2, 0.2, ("bad", "good"))],
        ["bad", "good"],
        maps={1: priced, 2: LabelMap((0, 1), "names", 2)},
        shots={1: score, 2: sentiment},
    )
    assert [r.id for r in ranked] == [2, 1]
    # Names that agree with the map make it cheap: two of a six-class model's classes for less than
    # a relabelling's uniform price would be without them.
    agree = np.full((2, 6), 0.25)
    agree[0, 1], agree[1, 2] = 0.75, 0.8
    cheap = held_out_score(
        predicted, None, labels, priced, names_log_prior(["bad", "good"], trec, agree, 0.05)
    )
    assert cheap.map_cost < math.log(30) / 4 and cheap.map_cost > math.log(2) / 4
    # The match's reason says which way the names lean; neither reading vouches for the map.
    assert score.names_agree is False and cheap.names_agree is True
    lean = rank_for_task(
        [Candidate(1, 0.4, tuple(trec))], ["bad", "good"], maps={1: priced}, shots={1: cheap}
    )[0].reason(4, ["bad", "good"], trec)
    assert "its 'entity' is your 'bad'" in lean and "its names lean the same way but do not decide it" in lean
    assert "its names do not say so" in ranked[1].reason(4, ["bad", "good"], trec)
    assert held_out_score(predicted, None, labels, priced).names_agree is None
    # Codes say nothing: the uniform price, as before.
    assert names_log_prior(["0", "1"], trec, against, 0.05) is None
    coded = choose_label_map(["0", "1"], trec, similarity=None, predicted=predicted, labels=labels)
    assert coded == LabelMap((1, 2), "examples", 6)
    assert examples_may_map(["bad", "good"], ["LABEL_0", "LABEL_1", "LABEL_2"])
    relabel = choose_label_map(
        ["bad", "good"], ["ham", "spam"], similarity=None, predicted=predicted % 2, labels=labels
    )
    assert relabel is not None and relabel.how == "examples"
    # By name, a larger model still serves a subset of its labels.
    subset = choose_label_map(["entity", "human"], trec, predicted=predicted, labels=labels)
    assert subset is not None and subset.how == "names" and subset.restricted


def test_a_few_of_a_larger_models_classes_are_the_examples_to_pick_priced_by_the_names() -> None:
    """ "bad" / "good" read as two of a news model's four topics clears the meaning margin (MiniLM's
    cosines below); with examples, they pick the classes and pay what the names say of the map,
    scored leave-one-out, so a sentiment model by meaning (as many classes: the meaning alone
    fixes it) keeps its edge. Without examples (a spec-only user) the meaning map stands."""
    news = ["world", "sports", "business", "science and technology"]
    sim = np.array([[0.315, 0.23, 0.244, 0.076], [0.285, 0.244, 0.32, 0.079]])
    assert map_by_meaning(["bad", "good"], news, sim) == LabelMap((0, 2), "meaning", 4)
    assert choose_label_map(["bad", "good"], news, similarity=sim) == LabelMap((0, 2), "meaning", 4)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    lucky = np.array([0, 0, 0, 2, 2, 2, 2, 0])  # 6 of 8 through "world" and "business"
    picked = choose_label_map(["bad", "good"], news, similarity=sim, predicted=lucky, labels=labels)
    assert picked == LabelMap((0, 2), "examples", 4)
    prior = names_log_prior(["bad", "good"], news, sim, 0.05)
    assert prior is not None
    priced = held_out_score(lucky, None, labels, picked, prior)
    assert priced.map_cost > 0 and priced.score < shot_score(lucky, None, labels, picked).log_likelihood
    sentiment = np.array([[0.549, 0.444], [0.398, 0.438]])
    same_size = choose_label_map(
        ["bad", "good"], ["negative", "positive"], similarity=sentiment, predicted=lucky % 2, labels=labels
    )
    assert same_size == LabelMap((0, 1), "meaning", 2)


def test_map_by_examples_picks_distinct_classes_of_a_larger_model() -> None:
    labels = np.array([0, 0, 1, 1, 2, 2])
    predicted = np.array([4, 4, 1, 1, 0, 4])  # user 2 is mostly model 0; 4 is taken by user 0
    label_map = map_by_examples(predicted, None, labels, 3, 5)
    assert label_map.model_class == (4, 1, 0) and label_map.restricted


def test_answers_are_restricted_to_the_mapped_classes() -> None:
    label_map = LabelMap((0, 2), "names", 3)
    probs = np.array([[0.5, 0.4, 0.1], [0.1, 0.8, 0.1], [0.1, 0.2, 0.7]])
    answered, kept = answers(probs.argmax(axis=1), probs, label_map)
    assert answered.tolist() == [0, 0, 1]  # the unmapped class 1 is never an answer
    assert kept is not None and np.allclose(kept.sum(axis=1), 1.0)
    answered, kept = answers(np.array([0, 1, 2]), None, label_map)
    assert answered.tolist() == [0, -1, 1] and kept is None  # without probabilities: no answer


def test_shot_score_reads_probabilities_through_the_map() -> None:
    label_map = LabelMap((1, 0), "names", 2)
    probs = np.array([[0.2, 0.8], [0.9, 0.1], [0.4, 0.6], [0.3, 0.7]])
    labels = np.array([0, 1, 1, 0])
    score = shot_score(probs.argmax(axis=1), probs, labels, label_map)
    assert score.accuracy == pytest.approx(0.75)
    assert score.confidence == pytest.approx(np.mean([0.8, 0.9, 0.4, 0.7]))
    assert score.log_likelihood == pytest.approx(np.mean(np.log([0.8, 0.9, 0.4, 0.7])))
    # Without probabilities its answer counts as sure: right is log 1, wrong is the floor (a
    # share of chance: 1/2 here).
    assert shot_score(probs.argmax(axis=1), None, labels, label_map) == ShotScore(
        0.75, 0.75, pytest.approx(np.log(FLOOR_SHARE_OF_CHANCE / 2) / 4)
    )
    with pytest.raises(ValueError, match="probabilities of shape"):
        shot_score(probs.argmax(axis=1), probs[:, :1], labels, label_map)


def test_choose_checked_gives_copies_of_one_spec_one_place() -> None:
    rng = np.random.default_rng(0)
    good, other = np.sign(rng.standard_normal(64)), np.sign(rng.standard_normal(64))
    names = ("ham", "spam")
    # Ten junk learnwares uploaded after the good one with a copy of its spec, then two others.
    ordered = [Candidate(1, 0.5, names)] + [Candidate(i, 0.5, names) for i in range(10, 20)]
    ordered += [Candidate(2, 0.3, names), Candidate(3, 0.2, ("a", "b", "c"))]
    vectors = {c.id: good for c in ordered[:11]} | {2: other, 3: -other}
    assert choose_checked(ordered, list(names), vectors, k=5) == [1, 2, 3]
    assert choose_checked(ordered, list(names), vectors, k=5, per_cluster=2) == [1, 10, 2, 3]
    # One that cannot answer is never checked; one without a vector counts as unique.
    assert choose_checked([Candidate(7, 0.9, ("x", "y"))], ["a", "b", "c"], {}, k=5) == []
    assert choose_checked([Candidate(8, 0.9, names)], list(names), {}, k=5) == [8]


def test_rank_for_task_order_and_reasons() -> None:
    user = ["ham", "spam"]
    ordered = by_tier(
        [
            Candidate(1, 0.6, ("ham", "spam")),
            Candidate(2, 0.5, ("ham", "spam")),
            Candidate(3, 0.4, ("ham", "spam")),
            Candidate(4, 0.3, ("a", "b")),
            Candidate(5, 0.9, ("a", "b", "c")),
            Candidate(6, 0.99, ("only",) * 1),
        ],
        user,
    )
    shots = {1: ShotScore(0.0, 0.1, -2.5), 2: ShotScore(0.9, 0.8, -0.3), 4: ShotScore(0.95, 0.9, -0.2)}
    maps = {4: LabelMap((1, 0), "examples", 2)}
    ranked = rank_for_task(ordered, user, maps=maps, shots=shots)
    # Checked and better than chance; unchecked by name; checked no better than chance; unchecked
    # with no map (the user could not read its answers); cannot answer.
    assert [r.id for r in ranked] == [4, 2, 3, 1, 5, 6]
    by_id = {r.id: r for r in ranked}
    assert by_id[1].checked and not by_id[1].beats_chance
    assert "no better than chance" in by_id[1].reason(16)
    assert "95% right" in by_id[4].reason(16) and "your examples" in by_id[4].reason(16)
    assert "log-probability of your labels -0.20" in by_id[4].reason(16)
    assert "no label map chosen" in by_id[5].reason() and "not checked" in by_id[5].reason()
    assert "cannot answer" in by_id[6].reason()
    assert "matched by name" in by_id[3].reason()
    # Without a shot check: tiers then cosine.
    assert [r.id for r in rank_for_task(ordered, user)] == [1, 2, 3, 5, 4, 6]


def test_a_match_without_a_map_never_tops_what_was_checked() -> None:
    """Every checked match no better than chance (a weak learnware of the user's own task, sure of
    its mistakes on 16 examples) and no unchecked one that answers by name: a checked one comes
    first, not the closest unchecked spec with other label names and no map (seen on the full
    identification profile: a cola user's top match was an intent model it could not read)."""
    user = ["unacceptable", "acceptable"]
    ordered = by_tier(
        [
            Candidate(1, 0.40, ("positive", "negative", "neutral")),
            Candidate(2, 0.30, tuple(user)),
            Candidate(3, 0.20, ("world", "sports")),
        ],
        user,
    )
    guess = math.log(1 / 2)
    own = ShotScore(0.62, 0.55, guess - 0.05)
    other = ShotScore(0.5, 0.5, guess - 0.3, map_cost=0.1)
    ranked = rank_for_task(ordered, user, maps={3: LabelMap((0, 1), "examples", 2)}, shots={2: own, 3: other})
    assert [r.id for r in ranked] == [2, 3, 1]
    assert not ranked[0].beats_chance and ranked[2].label_map is None
    assert "ranked after the checked matches" in ranked[2].reason()


def test_checks_no_better_than_chance_keep_the_spec_order() -> None:
    """64 examples of a 77-intent task whose codes are numbered otherwise than the model's classes:
    each code is seen once, so no map chosen on the other examples can name a held-out one, and
    every check scores a guess's or worse. The twin trained on random labels, near-uniform,
    scores a guess's exactly; the good model, sure of classes the map cannot name yet, scores
    below. Neither is evidence: the spec's order stands (the good model's spec is the closer),
    and each reason says so (seen for every such user of the identification benchmark)."""
    user = [str(i) for i in range(77)]
    intents = tuple(f"intent {i}" for i in range(77))
    ordered = by_tier(
        [Candidate(1, 0.52, intents), Candidate(2, 0.50, intents), Candidate(3, 0.22, intents)], user
    )
    guess = math.log(1 / 77)
    cost = map_cost(77, 77, 64)
    shots = {
        1: ShotScore(0.03, 0.02, guess - 0.5, map_cost=cost),  # good: sure, and wrong without a map
        2: ShotScore(0.03, 0.02, guess - 0.4, map_cost=cost),  # noisy twin
        3: ShotScore(0.02, 0.013, guess, map_cost=cost),  # random twin: uniform, a guess's exactly
    }
    maps = {i: LabelMap(tuple(range(77)), "examples", 77) for i in shots}
    ranked = rank_for_task(ordered, user, maps=maps, shots=shots)
    assert not any(r.beats_chance for r in ranked)
    assert [r.id for r in ranked] == [1, 2, 3]
    assert "then by spec similarity" in ranked[0].reason(64, user, intents)
    # A check that does beat chance still comes first, whatever its spec.
    better = {**shots, 3: ShotScore(0.5, 0.4, guess + 2.0 + cost, map_cost=cost)}
    assert [r.id for r in rank_for_task(ordered, user, maps=maps, shots=better)] == [3, 1, 2]


def test_a_match_beats_chance_by_its_score_not_by_its_accuracy() -> None:
    """Right more often than a guess, but so sure of its mistakes (or so dear a map) that its score
    is below a uniform guess's log 1/K: it is not ranked above the unchecked matches."""
    user = ["world", "sports", "business", "tech"]
    ordered = by_tier(
        [
            Candidate(1, 0.5, ("anger", "joy", "sadness", "fear")),
            Candidate(2, 0.4, tuple(user)),
            Candidate(3, 0.3, tuple(user)),
            Candidate(4, 0.2, tuple(user)),
        ],
        user,
    )
    guess = math.log(1 / 4)
    # 28% right (chance 25%), scoring -1.58 less 0.12 for the map: -1.70 < log 1/4 = -1.39.
    emotion = ShotScore(0.28, 0.22, -1.58, map_cost=0.12)
    # As often right, but its score beats a guess's.
    sure = ShotScore(0.28, 0.3, -1.30)
    # At chance too, but less bad than the emotion model: below chance, the score orders as well.
    unsure = ShotScore(0.25, 0.24, -1.45)
    shots = {1: emotion, 3: sure, 4: unsure}
    ranked = rank_for_task(ordered, user, maps={1: LabelMap((0, 1, 2, 3), "examples", 4)}, shots=shots)
    by_id = {r.id: r for r in ranked}
    assert emotion.score < unsure.score < guess < sure.score
    assert not by_id[1].beats_chance and by_id[3].beats_chance
    assert [r.id for r in ranked] == [3, 2, 4, 1]
    assert f"a uniform guess's {guess:.2f}" in by_id[1].reason(32)
    # A score at a guess's exactly (a model giving every label 1/4) does not beat it.
    flat = rank_for_task(ordered, user, shots={3: ShotScore(0.25, 0.25, guess)})
    assert not {r.id: r for r in flat}[3].beats_chance


def test_checked_matches_are_ordered_by_log_probability_not_by_lucky_accuracy() -> None:
    """On 16 easy examples an unsure model (trained on random labels) can be right every time; a
    sure model right 14 times gave the labels far more probability, and ranks first."""
    labels = np.repeat([0, 1], 8)
    lucky = np.column_stack([np.where(labels == 0, 0.55, 0.45), np.where(labels == 0, 0.45, 0.55)])
    sure = np.column_stack([np.where(labels == 0, 0.95, 0.05), np.where(labels == 0, 0.05, 0.95)])
    sure[[0, 8]] = sure[[0, 8]][:, ::-1]  # two confident mistakes
    by_name = LabelMap((0, 1), "names", 2)
    lucky_score = shot_score(lucky.argmax(axis=1), lucky, labels, by_name)
    sure_score = shot_score(sure.argmax(axis=1), sure, labels, by_name)
    assert lucky_score.accuracy == 1.0 and sure_score.accuracy == 0.875
    user = ["negative", "positive"]
    ordered = [Candidate(1, 0.3, tuple(user)), Candidate(2, 0.2, tuple(user))]
    ranked = rank_for_task(ordered, user, shots={1: lucky_score, 2: sure_score})
    assert [r.id for r in ranked] == [2, 1]


def test_the_check_looks_wider_when_no_learnware_answers_by_name() -> None:
    named = [Candidate(1, 0.3, ("ham", "spam")), Candidate(2, 0.2, ("a", "b"))]
    unnamed = [Candidate(2, 0.2, ("a", "b")), Candidate(3, 0.1, ("x", "y", "z"))]
    assert check_count(named, ["ham", "spam"], 5, 20) == 5
    assert check_count(unnamed, ["0", "1"], 5, 20) == 20
    assert check_count(unnamed, ["0", "1"], 0, 20) == 0  # the check switched off stays off


def test_a_few_confident_mistakes_cost_less_than_hedging_on_everything() -> None:
    """A spam filter right 14 of 16 times and sure, against a sentiment model mapped onto ham /
    spam that says about 0.6 every time and is right 13 times: the filter ranks first."""
    labels = np.repeat([0, 1], 8)
    sure = np.column_stack([np.where(labels == 0, 0.97, 0.03), np.where(labels == 0, 0.03, 0.97)])
    sure[[0, 8]] = [[0.001, 0.999], [0.999, 0.001]]  # two confident mistakes
    hedge = np.column_stack([np.where(labels == 0, 0.6, 0.4), np.where(labels == 0, 0.4, 0.6)])
    hedge[[1, 2, 9]] = hedge[[1, 2, 9]][:, ::-1]
    filter_score = shot_score(sure.argmax(axis=1), sure, labels, LabelMap((0, 1), "names", 2))
    hedge_score = held_out_score(hedge.argmax(axis=1), hedge, labels, LabelMap((0, 1), "examples", 2))
    assert filter_score.accuracy == 0.875 and hedge_score.accuracy < filter_score.accuracy
    assert filter_score.rank_key > hedge_score.rank_key


def test_copies_of_a_spec_rank_behind_their_original() -> None:
    rng = np.random.default_rng(1)
    good, other = np.sign(rng.standard_normal(256)), np.sign(rng.standard_normal(256))
    near = good.copy()
    near[:3] *= -1  # a copy a hair away (cosine 0.98): still a copy
    names = ("ham", "spam")
    ordered = [Candidate(12, 0.51, names), Candidate(11, 0.51, names), Candidate(5, 0.3, names)]
    ordered += [Candidate(1, 0.5, names), Candidate(20, 0.49, ("x", "y"))]
    vectors = {12: near, 11: good, 5: other, 1: good, 20: good}
    order = [c.id for c in originals_first(ordered, list(names), vectors)]
    # 1 is the oldest of the group {12, 11, 1}; 20 has the same spec but another tier (label map).
    assert order == [1, 11, 12, 5, 20]


def test_a_map_chosen_by_the_examples_is_scored_leaving_each_one_out() -> None:
    """A six-class model restricted to the user's two labels by the examples fits them by luck;
    scored under maps chosen without each example, the luck is gone."""
    rng = np.random.default_rng(3)
    labels = np.repeat([0, 1], 8)
    probs = rng.dirichlet(np.ones(6), size=16)  # unrelated to the labels
    predicted = probs.argmax(axis=1)
    label_map = map_by_examples(predicted, probs, labels, 2, 6)
    optimistic = shot_score(predicted, probs, labels, label_map).accuracy
    honest = held_out_score(predicted, probs, labels, label_map).accuracy
    assert optimistic > 0.5 and honest < optimistic
    # A model that does the task keeps its score; a map by names is scored as it is.
    good = labels.copy()
    assert held_out_score(good, None, labels, map_by_examples(good, None, labels, 2, 2)).accuracy == 1.0
    by_name = LabelMap((0, 1), "names", 2)
    assert held_out_score(predicted % 2, None, labels, by_name) == shot_score(
        predicted % 2, None, labels, by_name
    )


def test_a_map_the_examples_chose_costs_its_description_length() -> None:
    """log(number of injective maps) / examples: a two-class relabelling log 2, two of a six-class
    model's classes log 30; a map by name or meaning costs nothing."""
    assert map_cost(2, 2, 16) == pytest.approx(math.log(2) / 16)
    assert map_cost(2, 6, 16) == pytest.approx(math.log(30) / 16)
    assert map_cost(77, 77, 64) == pytest.approx(math.lgamma(78) / 64)
    assert map_cost(3, 2, 16) == 0.0 and map_cost(2, 2, 0) == 0.0
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    named = held_out_score(labels, None, labels, LabelMap((0, 1), "names", 2))
    assert named.map_cost == 0.0 and named.score == named.log_likelihood
    relabel = held_out_score(1 - labels, None, labels, LabelMap((1, 0), "examples", 2))
    assert relabel.map_cost == pytest.approx(math.log(2) / 8)
    assert relabel.score == pytest.approx(relabel.log_likelihood - relabel.map_cost)


def test_a_lucky_fit_of_a_larger_model_restricted_to_codes_loses_to_a_relabelling() -> None:
    """Sixteen examples named "0" / "1". A six-class model restricted to two of its classes (one of
    30 maps) fits one example more than a two-class model relabelled (one of 2 maps): its cost
    is higher by log 15 / 16 ≈ 0.17 nats an example, more than the one example buys, so the
    relabelling comes first; with names that decide, the larger model keeps no edge it did not earn."""
    labels = np.array([0] * 8 + [1] * 8)
    binary = labels.copy()
    binary[[0, 8, 9]] = 1 - binary[[0, 8, 9]]  # 13 of 16 right
    six = np.where(labels == 0, 4, 2)
    six[[0, 8]] = np.array([2, 4])  # 14 of 16 right, through classes 4 and 2 of six
    users = ["0", "1"]
    small = choose_label_map(users, ["neg", "pos"], predicted=binary, labels=labels)
    large = choose_label_map(users, [f"c{i}" for i in range(6)], predicted=six, labels=labels)
    assert small is not None and large is not None and large.model_class == (4, 2)
    small_score = held_out_score(binary, None, labels, small)
    large_score = held_out_score(six, None, labels, large)
    assert large_score.accuracy > small_score.accuracy
    assert large_score.log_likelihood > small_score.log_likelihood
    assert large_score.score < small_score.score
    ordered = [Candidate(1, 0.3, tuple(f"c{i}" for i in range(6))), Candidate(2, 0.2, ("neg", "pos"))]
    ranked = rank_for_task(ordered, users, maps={1: large, 2: small}, shots={1: large_score, 2: small_score})
    assert [r.id for r in ranked] == [2, 1]
    assert f"less {large_score.map_cost:.2f} for the label map your examples chose" in ranked[1].reason(16)


def test_check_on_examples_is_the_map_and_its_priced_score() -> None:
    """The shot check of one learnware, as the worker and the benchmark run it."""
    trec = ["abbreviation", "entity", "description", "human", "location", "number"]
    labels = np.array([0, 0, 1, 1])
    predicted = np.array([1, 1, 2, 2])
    sim = np.full((2, 6), 0.25)
    sim[0, 1], sim[1, 2] = 0.75, 0.8
    checked = check_on_examples(
        ["bad", "good"], trec, predicted, None, labels, similarity=sim, temperature=0.05
    )
    assert checked is not None
    label_map, score = checked
    assert label_map == LabelMap((1, 2), "examples", 6, names_weighed=True)
    prior = names_log_prior(["bad", "good"], trec, sim, 0.05)
    assert score == held_out_score(predicted, None, labels, label_map, prior)
    assert (
        check_on_examples(
            trec[:3], ["neg", "pos"], predicted % 2, None, labels, similarity=None, temperature=0.05
        )
        is None
    )


def test_the_names_and_the_examples_weigh_in_together_on_a_map() -> None:
    """A user's renamed many-intent task ("distance class" for "distance") with fewer examples
    than labels: the meaning margin fails on two near names, so the examples map; by them alone
    the labels without an example go anywhere, and the map costs what any of the 360 maps of
    four labels into six classes costs (each example, its label's only one, is scored under the
    map chosen on all of them, so both maps are right on every example). Weighed with
    the names' reading (the shortest two-part code), the examples settle what the names leave
    open, clear names settle what the examples cannot, and one erring example does not pair two
    labels a person would never pair; the match says how the map was chosen."""
    model = ["distance", "directions", "travel notification", "alarm", "timer", "weather"]
    user = [f"{n} class" for n in reversed(model)]
    truth = (5, 4, 3, 2, 1, 0)  # user label i is model class truth[i]
    sim = np.full((6, 6), 0.2)
    for i, j in enumerate(truth):
        sim[i, j] = 0.9
    sim[4, 0] = sim[5, 1] = 0.89  # "directions class" and "distance class" near both
    assert map_by_meaning(user, model, sim) is None
    labels, predicted = np.array([0, 1, 2, 4]), np.array([5, 4, 3, 1])
    by_counts = map_by_examples(predicted, None, labels, 6, 6)
    assert by_counts.model_class != truth and not by_counts.names_weighed
    alone = held_out_score(predicted, None, labels, by_counts)
    assert alone.accuracy == 1.0
    assert alone.map_cost == pytest.approx(math.log(6 * 5 * 4 * 3) / len(labels))
    checked = check_on_examples(user, model, predicted, None, labels, similarity=sim, temperature=0.05)
    assert checked is not None
    label_map, score = checked
    assert label_map == LabelMap(truth, "examples", 6, names_weighed=True)
    assert score.accuracy == 1.0 and score.names_agree is True
    assert score.map_cost < alone.map_cost and score.score > alone.score
    reason = rank_for_task([Candidate(1, 0.4, tuple(model))], user, maps={1: label_map}, shots={1: score})[
        0
    ].reason(4, user, model)
    assert "labels mapped by your examples weighed with the meaning of the names" in reason
    prior = names_log_prior(user, model, sim, 0.05)
    assert prior is not None
    # Where the names barely separate two classes, an example decides: the model answers
    # "directions class" with "distance".
    assert map_by_examples(np.array([5, 4, 3, 0]), None, labels, 6, 6, prior).model_class[4] == 0
    # Where they are clear, one erring example does not: "timer class" answered with "alarm".
    erring = map_by_examples(np.array([5, 3, 3, 1]), None, labels, 6, 6, prior)
    assert erring.model_class == truth
    assert map_by_examples(np.array([5, 3, 3, 1]), None, labels, 6, 6).model_class[1] != 4
    # Sixteen examples against names that lean one way only a little win; against clear names
    # they do not: an inverted classifier is not read the other way round.
    binary, user2, model2 = np.repeat([0, 1], 8), ["normal", "junk"], ["ham", "spam"]
    lean = names_log_prior(user2, model2, np.array([[0.5, 0.45], [0.45, 0.5]]), 0.05)
    clear = names_log_prior(user2, model2, np.array([[0.9, 0.3], [0.3, 0.9]]), 0.05)
    assert lean is not None and clear is not None
    assert map_by_examples(1 - binary, None, binary, 2, 2, lean).model_class == (1, 0)
    assert map_by_examples(1 - binary, None, binary, 2, 2, clear).model_class == (0, 1)
    # Codes have no reading: the examples alone, as before.
    assert (
        choose_label_map([str(i) for i in range(6)], model, predicted=predicted, labels=labels) == by_counts
    )


def _similarity(rows: list[str] | tuple[str, ...], columns: list[str] | tuple[str, ...]) -> np.ndarray:
    """Names' similarity as the base would read these: a word and its synonym or translation are
    close, anything else far."""
    same = [
        {"bad", "negative", "négatif"},
        {"good", "positive", "positif"},
        {"rage", "anger"},
        {"sorrow", "sadness"},
    ]
    return np.asarray(
        [[0.9 if any({r, c} <= group for group in same) else 0.1 for c in columns] for r in rows]
    )


def test_a_task_no_learnware_names_is_realigned_to_their_label_sets() -> None:
    sets = [
        (["negative", "positive"], 3),
        (["ham", "spam"], 1),
        (["Positive", "negative"], 1),  # the same set: order, case aside
        (["anger", "joy", "optimism", "sadness"], 2),
        (["subjective", "objective"], 1),
        (["a", "b", "c"], 1),
    ]
    # Codes: the two-class sets, each both ways round, the most common first, in the names of the
    # first learnwares that have them; no many-class set (codes map nothing by meaning).
    plan = realignments(["0", "1"], sets, _similarity)
    assert [(r.names, r.both_ways) for r in plan] == [
        (("negative", "positive"), True),
        (("ham", "spam"), True),
        (("subjective", "objective"), True),
    ]
    assert plan[0].label_set == frozenset({"negative", "positive"})
    # Names whose meaning maps them: under that map, one way round, and onto a few of a larger
    # model's classes too; sets they do not map, both ways round where two-class, else not at all.
    plan = realignments(["bon", "mauvais"], sets, _similarity, limit=2)
    assert [(r.names, r.both_ways) for r in plan] == [
        (("negative", "positive"), True),
        (("ham", "spam"), True),
    ]
    plan = realignments(["positif", "négatif"], sets, _similarity)
    assert (plan[0].names, plan[0].both_ways) == (("positive", "negative"), False)
    assert all(r.names != ("anger", "sadness") for r in plan)
    plan = realignments(["rage", "sorrow"], sets, _similarity)
    assert ((("anger", "sadness"), False)) in [(r.names, r.both_ways) for r in plan]
    # Not when a learnware answers the labels by name (the spec under the user's own names is
    # then the comparison). More than two labels their meaning does not map: a placeholder for
    # the search, onto sets of as many classes only.
    assert realignments(["spam", "ham"], sets, _similarity) == []
    plan = realignments(["x", "y", "z"], [(["u", "v", "w"], 1), (["p", "q", "r", "s"], 1)], _similarity)
    assert [(r.names, r.reading, r.search_only) for r in plan] == [(("u", "v", "w"), True, True)]
    assert realignments(["0", "1"], [(["world", "sports", "business", "tech"], 1)]) == []
    # Only the 4 × limit most common label sets are read: rare ones past them cost nothing.
    rare = [([f"a{i}", f"b{i}", f"c{i}"], 2) for i in range(4)] + [(["yes", "no"], 1)]
    assert realignments(["0", "1"], rare, _similarity, limit=1) == []
    assert [r.names for r in realignments(["0", "1"], rare, _similarity, limit=2)] == [("yes", "no")]
    # Numbered codes of more than two labels: realigned as their numbers read, onto sets of as
    # many classes only, marked as a reading; letters read as numbers do, A as class 0.
    plan = realignments(["3", "1", "0", "2"], sets, _similarity)
    assert [(r.names, r.both_ways, r.reading) for r in plan] == [
        (("sadness", "joy", "anger", "optimism"), False, True)
    ]
    assert plan[0].label_set == frozenset({"anger", "joy", "optimism", "sadness"})
    assert not plan[0].search_only
    plan = realignments(["D", "B", "A", "C"], sets, _similarity)
    assert [(r.names, r.reading, r.search_only) for r in plan] == [
        (("sadness", "joy", "anger", "optimism"), True, False)
    ]
    # Codes that read no number (mixed letters and numbers): only the search can align them.
    plan = realignments(["a", "1", "c", "d"], sets, _similarity)
    assert [(r.label_set, r.search_only) for r in plan] == [
        (frozenset({"anger", "joy", "optimism", "sadness"}), True)
    ]


def test_a_realigned_learnware_is_scored_under_the_alignment_that_fits() -> None:
    own = [Candidate(1, 0.02, ("ham", "spam")), Candidate(2, 0.30, ("world", "sports", "business", "tech"))]
    both_ways = Realignment(frozenset({"ham", "spam"}), ("ham", "spam"), True)
    one_way = Realignment(frozenset({"negative", "positive"}), ("negative", "positive"), False)
    # The refitted spec negated: the other alignment fits, and counts as well as this one would;
    # one way round, a negative cosine stays negative.
    assert aligned_score(both_ways, -0.41) == pytest.approx(0.41)
    assert aligned_score(one_way, -0.41) == pytest.approx(-0.41)
    realigned = [
        Candidate(1, aligned_score(both_ways, -0.41), ("ham", "spam")),
        Candidate(3, 0.35, ("negative", "positive")),  # found only by the refitted spec
    ]
    scored = {c.id: c for c in with_alignment(own, realigned)}
    assert scored[1].score == pytest.approx(0.41) and scored[1].aligned
    assert scored[3].score == pytest.approx(0.35) and scored[3].label_names == ("negative", "positive")
    assert scored[2] == own[1]  # not of a realigned set: its own cosine
    ordered = by_tier(list(scored.values()), ["0", "1"])
    assert [c.id for c in ordered] == [1, 3, 2]
    ranked = rank_for_task(ordered, ["0", "1"])
    assert ranked[0].aligned and not ranked[2].aligned
    assert (
        ranked[0].reason().endswith("spec similarity 0.410 (your task's spec refitted under its label names)")
    )
    assert ranked[2].reason().endswith("spec similarity 0.300")


def test_numbered_codes_read_as_class_numbers() -> None:
    """A dataset's class ids are positions in its list of classes, the order a model trained on it
    keeps: "3" is its class 3, counted from 1 where the codes run to its class count; its own
    numbered codes by number; letters count from A as 0. Names, numbers out of range and codes
    that mix letters with numbers read nothing."""
    four = ["anger", "joy", "optimism", "sadness"]
    assert code_order(["0", "1", "2", "3"], four) == (0, 1, 2, 3)
    assert code_order(["LABEL_2", "label 0"], four) == (2, 0)  # a few of them
    assert code_order(["1", "2", "3", "4"], four) == (0, 1, 2, 3)
    assert code_order(["1", "2"], four) == (1, 2)  # within range: counted from 0
    assert code_order(["class 7", "class 3"], ["LABEL_3", "LABEL_7", "LABEL_9"]) == (1, 0)
    assert code_order(["0", "1"], ["LABEL_3", "LABEL_7"]) is None
    assert code_order(["0", "5"], four) is None
    assert code_order(["a", "b"], four) == (0, 1)
    assert code_order(["D", "C", "B", "A"], four) == (3, 2, 1, 0)
    assert code_order(["B", "C", "D", "E"], four) is None  # letters are not counted from 1
    assert code_order(["0", "1"], ["A", "B"]) == (0, 1)  # its own letters by number
    assert code_order(["a", "2"], four) is None
    assert code_order(["a", "A"], four) is None  # one letter twice
    assert code_order(["anger", "joy"], four) is None
    assert code_order(["1", "01"], four) is None  # one number twice


def test_a_map_told_as_exceptions_to_the_reading() -> None:
    """How many labels leave their numbers, which, and where each goes."""
    assert reading_nats((0, 1, 2), (0, 1, 2), 5) == pytest.approx(math.log(4))
    assert reading_nats((0, 4, 2), (0, 1, 2), 5) == pytest.approx(math.log(4) + math.log(3) + math.log(4))
    # Keeping 150 intents' numbers costs log 151 nats; any one map of them, log 150!.
    assert reading_nats(tuple(range(150)), tuple(range(150)), 150) == pytest.approx(math.log(151))


def _intents(
    truth: np.ndarray, seen: np.ndarray, per_label: int, sure: float = 0.8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A model of ``len(truth)`` intents that answers user label u as its class ``truth[u]`` with
    probability ``sure``, on ``per_label`` examples of each label in ``seen``."""
    n = len(truth)
    labels = np.repeat(seen, per_label)
    probs = np.full((len(labels), n), (1.0 - sure) / (n - 1))
    probs[np.arange(len(labels)), truth[labels]] = sure
    return probs.argmax(axis=1), probs, labels


def test_the_codes_reading_places_labels_the_examples_cannot() -> None:
    """Twenty intents named "0" … "19" in the model's own order, with one example of each of
    eight: the examples alone cannot say where the other twelve go; the numbers place them, and
    the match pays little for its map and says how it was chosen."""
    n, user = 20, [str(i) for i in range(20)]
    model = [f"intent {i}" for i in range(20)]
    seen = np.array([0, 2, 3, 7, 9, 11, 15, 18])
    predicted, probs, labels = _intents(np.arange(n), seen, 1)
    alone = map_by_examples(predicted, probs, labels, n, n)
    assert alone.numbers_follow is None
    checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
    assert checked is not None
    label_map, score = checked
    assert label_map.model_class == tuple(range(n)) and label_map.how == "examples"
    assert label_map.numbers_follow == n and label_map.numbers_hold
    # Held out, each example's label has no other: only the numbers place it, and they are right.
    assert score.accuracy == 1.0
    # The map is paid for on the eight labels with examples: all keep their numbers (log 9).
    assert score.map_cost == pytest.approx((math.log(len(seen) + 1) + math.log(2)) / len(labels))
    uniform = held_out_score(predicted, probs, labels, alone)
    assert uniform.map_cost == pytest.approx(map_cost(len(seen), n, len(labels)))
    # Without the numbers each example, its label's only one, is scored under the map chosen on
    # all of them (right, at 0.8): the two maps differ only in what naming them costs, log 20! /
    # 12! nats for eight classes out of twenty against log 9 and a bit.
    assert uniform.accuracy == 1.0 and uniform.log_likelihood == pytest.approx(math.log(0.8))
    saved = math.lgamma(n + 1) - math.lgamma(n - len(seen) + 1) - math.log(len(seen) + 1) - math.log(2)
    assert score.score - uniform.score == pytest.approx(saved / len(labels))
    text = label_map.describe(user, model)
    assert "weighed with your codes read as its class numbers" in text
    assert "20 of your 20 labels are where their numbers put them" in text
    with pytest.raises(ValueError, match="codes' reading"):
        map_by_examples(predicted, probs, labels, n, n, order=(0,) * n)


def test_examples_overrule_the_reading_label_by_label_or_drop_it() -> None:
    """Where a sure model answers one label as another class on each of its examples, that label
    leaves its number and the rest keep theirs. Codes numbered in no order the examples bear out
    (scrambled) are no reading at all: the examples' own map stands, priced as any map."""
    n, user = 20, [str(i) for i in range(20)]
    model = [f"intent {i}" for i in range(20)]
    seen = np.arange(0, 20, 2)
    truth = np.arange(n)
    truth[[4, 5]] = [5, 4]  # the model's class 5 answers the user's "4"
    predicted, probs, labels = _intents(truth, seen, 3)
    checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
    assert checked is not None
    label_map, score = checked
    assert label_map.numbers_hold and label_map.model_class[4] == 5 and label_map.model_class[5] == 4
    assert label_map.model_class[:4] == (0, 1, 2, 3) and label_map.model_class[6:] == tuple(range(6, n))
    assert label_map.numbers_follow == n - 2
    # Paid for on the ten labels with examples: one of them ("4") leaves its number ("5", which
    # has none, moves too, but its place is not evidence and costs nothing).
    exceptions = math.log(len(seen) + 1) + math.log(len(seen)) + math.log(n - 1)
    assert score.map_cost == pytest.approx((exceptions + math.log(2)) / len(labels))
    scrambled = np.random.default_rng(5).permutation(n)
    predicted, probs, labels = _intents(scrambled, seen, 3)
    checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
    assert checked is not None
    label_map, score = checked
    assert not label_map.numbers_hold
    assert all(label_map.model_class[u] == scrambled[u] for u in seen)  # the examples place what they see
    assert score.accuracy == 1.0  # three examples a label: the other two place the held-out one
    ten_of_twenty = math.lgamma(n + 1) - math.lgamma(n - len(seen) + 1)  # the ten labels with examples
    assert score.map_cost == pytest.approx((ten_of_twenty + math.log(2)) / len(labels))
    assert "your examples do not bear that numbering out" in label_map.describe(user, model)
    # Two labels: the numbers say nothing either code can use; an inverted classifier is mapped
    # the other way round, as before.
    binary = np.repeat([0, 1], 8)
    flipped = check_on_examples(
        ["0", "1"], ["ham", "spam"], 1 - binary, None, binary, similarity=None, temperature=0.05
    )
    assert flipped is not None and flipped[0].model_class == (1, 0) and flipped[1].accuracy == 1.0


def test_codes_counted_from_another_class_are_read_so_where_the_examples_bear_it_out() -> None:
    """A user's codes numbered from another of the model's classes (shifted round by five), or
    backwards: the examples of ten of twenty labels bear that numbering out, so it places the
    ten labels without examples too, which the examples alone cannot; it is paid for as the
    codes' own reading is, plus what naming it among the 39 other numberings costs."""
    n, user = 20, [str(i) for i in range(20)]
    model = [f"intent {i}" for i in range(20)]
    seen = np.arange(0, 20, 2)
    for truth, reversed_ in (((np.arange(n) + 5) % n, False), ((n - 1 - np.arange(n) + 3) % n, True)):
        predicted, probs, labels = _intents(truth, seen, 3)
        checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
        assert checked is not None
        label_map, score = checked
        assert label_map.numbers_hold and label_map.model_class == tuple(int(j) for j in truth)
        assert label_map.numbering is not None and label_map.numbering.reversed == reversed_
        assert label_map.numbering.nats == pytest.approx(math.log(2 * n - 1))
        assert score.accuracy == 1.0
        kept = math.log(len(seen) + 1)  # no label with examples leaves the numbering
        assert score.map_cost == pytest.approx((kept + math.log(2 * n - 1) + math.log(2)) / len(labels))
        text = label_map.describe(user, model)
        assert (
            "your codes read as its class numbers counted " + ("backwards" if reversed_ else "in order")
            in text
        )
        assert "20 of your 20 labels are where their numbers put them" in text
    # The codes' own numbering is not given up for another that fits a weak model's lucky answers
    # a little better: another costs log 39 nats to name.
    own = np.arange(n)
    predicted, probs, labels = _intents(own, seen, 1, sure=0.2)
    predicted[0], probs[0] = 7, np.roll(probs[0], 7)  # one answer fits "shifted by seven"
    checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
    assert checked is not None and checked[0].numbering is not None and checked[0].numbering.own
    # Two classes: no numbering but the codes' own is read (the other is the map the examples
    # choose); nor for a few of a larger model's classes, however well a window of them fits.
    assert best_numbering(np.zeros((2, 2)), np.arange(2), (0, 1), 2).own
    window = np.zeros((5, 7))
    window[np.arange(5), np.arange(5) + 2] = 10.0
    assert best_numbering(window, np.arange(5), tuple(range(5)), 7).own
    assert best_numbering(np.vstack([window, np.zeros((2, 7))]), np.arange(5), tuple(range(7)), 7).shift == 2


def _weak_emoji_model(truth: np.ndarray, per_label: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A weak model of ``len(truth)`` emoji that likes its classes 0, 1 and 2: of each label u's
    ``per_label`` examples it answers one as its class ``truth[u]`` (probability 0.5) and the
    rest as one of its favourites (0.6; 0.02 on ``truth[u]``)."""
    n = len(truth)
    labels = np.repeat(np.arange(n), per_label)
    probs = np.zeros((len(labels), n))
    for i, u in enumerate(labels):
        row = np.full(n, 0.0)
        row[[0, 1, 2]] = 0.1
        if i % per_label == 0:
            row[truth[u]] = 0.5
        else:
            row[(u + 1) % 3] = 0.6
            row[truth[u]] = max(row[truth[u]], 0.02)
        rest = np.flatnonzero(row == 0.0)
        row[rest] = (1.0 - row.sum()) / len(rest)
        probs[i] = row
    return probs.argmax(axis=1), probs, labels


def test_a_weak_model_of_many_classes_keeps_the_codes_reading() -> None:
    """A model right on a third of a 20-emoji user's examples (chance: a twentieth) answers most
    labels' examples with its favourite classes, so "any other class" explains many labels
    better than their numbers; but only one label can go to each favourite, and the numbers tell
    the map in a few nats where the examples' own map costs log 20!. The reading holds, and held
    out each example is scored under it. Codes counted from another class are read so; scrambled
    codes over the same model are no reading."""
    n, user = 20, [str(i) for i in range(20)]
    model = [f"emoji {i}" for i in range(20)]
    predicted, probs, labels = _weak_emoji_model(np.arange(n))
    assert np.mean(predicted == labels) == pytest.approx(1 / 3)
    checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
    assert checked is not None
    label_map, score = checked
    # Labels 0, 1 and 2, answered mostly as the next favourite, follow their examples there.
    assert label_map.numbers_hold and label_map.model_class == (1, 2, 0, *range(3, n))
    assert score.accuracy == pytest.approx(17 / 60)  # held out, under the map the others chose
    told = reading_nats(label_map.model_class, tuple(range(n)), n)
    assert score.map_cost == pytest.approx((told + math.log(2)) / len(labels))
    assert told < math.lgamma(n + 1) / 2
    shifted = (np.arange(n) + 7) % n
    predicted, probs, labels = _weak_emoji_model(shifted)
    checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
    assert checked is not None and checked[0].numbers_hold
    assert checked[0].numbering is not None and checked[0].numbering.shift == 7
    assert checked[0].numbers_follow is not None and checked[0].numbers_follow >= n - 3
    scrambled = np.random.default_rng(7).permutation(n)
    predicted, probs, labels = _weak_emoji_model(scrambled)
    checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
    assert checked is not None
    assert not checked[0].numbers_hold


def test_a_label_with_one_example_held_out_is_told_in_two_parts() -> None:
    """Codes numbered in no order of a 30-intent model's classes, one example of each of 24
    labels: held out, an example's label has nothing to place it, so it is scored under the map
    chosen on all of them, the map's price paid for its class. A good model fits each example
    and beats a guess by what it saves over that price; a twin that answers every other label as
    the next one's class cannot be honoured by one injective map on half of them and scores below
    a guess. Scored at chance instead (its label on any class the others leave free), every model
    tied at a guess's score and kept the spec's order, a twin trained on 40% wrong labels first for
    the full benchmark's users of 77 intents renumbered."""
    n, user = 30, [str(i) for i in range(30)]
    model = [f"intent {i}" for i in range(30)]
    shifted = np.random.default_rng(11).permutation(n)  # scrambled: no numbering reads it
    seen = np.arange(24)
    confused = shifted.copy()
    confused[0:24:2] = shifted[1:24:2]  # labels 0 and 1 both answered as label 1's class, …
    scores = {}
    for name, truth in (("good", shifted), ("confused", confused)):
        predicted, probs, labels = _intents(truth, seen, 1, sure=0.9)
        checked = check_on_examples(user, model, predicted, probs, labels, similarity=None, temperature=0.05)
        assert checked is not None
        scores[name] = checked[1]
        if name == "good":
            assert not checked[0].numbers_hold
            assert all(checked[0].model_class[u] == shifted[u] for u in seen)
    good, confused_score = scores["good"], scores["confused"]
    price = (math.lgamma(n + 1) - math.lgamma(n - len(seen) + 1) + math.log(2)) / len(seen)
    assert good.accuracy == 1.0 and good.log_likelihood == pytest.approx(math.log(0.9))
    assert good.map_cost == pytest.approx(price)
    assert confused_score.accuracy < 0.5  # one map honours at most one of each colliding pair
    assert good.score > math.log(1 / n) > confused_score.score
    ranked = rank_for_task(
        [Candidate(2, 0.5, tuple(model)), Candidate(1, 0.3, tuple(model))],
        user,
        shots={1: good, 2: confused_score},
    )
    assert [r.id for r in ranked] == [1, 2] and ranked[0].beats_chance and not ranked[1].beats_chance


def test_a_reading_counts_only_where_it_stands_out() -> None:
    """Scored under the codes' reading, a learnware takes that score only where it is above every
    candidate's own (the user may number classes otherwise: a wrong reading is one more draw of
    noise), and says which it was scored by."""
    four = ("anger", "joy", "optimism", "sadness")
    own = [Candidate(1, 0.10, four), Candidate(2, 0.05, four), Candidate(3, 0.03, four)]
    realigned = [
        Candidate(1, 0.02, four, reading=True),  # lower than its own: its own stands
        Candidate(2, 0.08, four, reading=True),  # higher than its own, not than the best own score
        Candidate(3, 0.40, four, reading=True),  # above every own score: the reading counts
    ]
    scored = {c.id: c for c in with_alignment(own, realigned)}
    assert scored[1] == own[0] and scored[2] == own[1]
    assert scored[3].score == pytest.approx(0.40) and scored[3].aligned and scored[3].reading
    codes = ["0", "1", "2", "3"]
    ranked = rank_for_task(by_tier(list(scored.values()), codes), codes)
    assert [r.id for r in ranked] == [3, 1, 2]
    assert (
        ranked[0]
        .reason()
        .endswith(
            "spec similarity 0.400 (your task's spec refitted under its label names, your codes read as "
            "its class numbers)"
        )
    )
    assert ranked[1].reason().endswith("spec similarity 0.100")


def test_the_best_alignment_is_the_assignment_of_most_gain() -> None:
    gain = np.array([[0.1, 0.0, 0.9], [0.8, 0.2, 0.0], [0.0, 0.7, 0.6]])
    assert best_alignment(gain) == (2, 0, 1)
    # A class without examples has a row of zeros: it takes whatever class is left.
    assert best_alignment(np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))[0] == 1
    with pytest.raises(ValueError, match="a row per task class"):
        best_alignment(np.zeros((3, 2)))


def test_codes_are_aligned_with_each_learnware_as_its_spec_agrees_most() -> None:
    """A reading of numbered codes is replaced by the alignments the learnwares' own specs agree
    with most: learnwares that agree on one share a refit, each scores only its own, and the
    cost cap leaves a reading past it as it was."""
    four = ("anger", "joy", "optimism", "sadness")
    codes = ["0", "1", "2", "3"]
    plan = realignments(codes, [(list(four), 3), (["a", "b", "c", "d"], 1)])
    assert all(r.reading and r.learnwares is None for r in plan)
    shifted = np.roll(np.eye(4), 1, axis=1)  # the task's class c is the learnware's class c + 1
    members = {  # each spec vector holds its learnware's id, so the gains can tell them apart
        plan[0].label_set: [(i, np.full(8, float(i)), list(four)) for i in (1, 2, 3)],
        plan[1].label_set: [(9, np.full(8, 9.0), ["a", "b", "c", "d"])],
    }
    gains = {1: shifted, 2: shifted, 3: np.eye(4)}
    calls: list[int] = []

    def gains_of(chosen: list[tuple[np.ndarray, list[str]]]) -> list[np.ndarray]:
        calls.append(len(chosen))
        return [gains[int(vector[0])] for vector, _ in chosen]

    searched = with_searched(plan, lambda r: members[r.label_set], gains_of, limit=3)
    assert calls == [3]  # the cap: three learnwares in all, the second reading kept as it was
    by_ids = {r.learnwares: r for r in searched if r.learnwares is not None}
    assert by_ids[frozenset({1, 2})].names == ("joy", "optimism", "sadness", "anger")
    assert by_ids[frozenset({3})].names == four
    assert all(r.reading for r in searched)
    assert [r for r in searched if r.learnwares is None] == [plan[1]]
    with pytest.raises(ValueError, match="not the label set"):
        searched_realignments(plan[0], [(9, ["a", "b", "c", "d"])], [np.eye(4)])

    # Scored by such an alignment, a learnware that stands out says so.
    own = [Candidate(1, 0.01, four), Candidate(3, 0.02, four)]
    scored = with_alignment(own, [Candidate(1, 0.30, four, reading=True, searched=True)])
    ranked = rank_for_task(by_tier(scored, codes), codes)
    assert ranked[0].id == 1 and ranked[0].searched
    assert (
        ranked[0]
        .reason(0, codes, four)
        .endswith(
            "spec similarity 0.300 (your task's spec refitted under its label names, your codes aligned "
            "with its classes as its spec agrees most)"
        )
    )


def test_names_that_map_nothing_are_aligned_by_the_search_or_not_at_all() -> None:
    """Labels of more than two classes whose meaning maps nothing (another language, rare words)
    have no reading to fall back on: the search aligns them with each learnware as its spec
    agrees most, and past the cost cap the placeholder is dropped, not refitted in an order
    nobody chose. The reason says labels, not codes."""
    three = ("negative", "neutral", "positive")
    user = ["mécontent", "bof", "ravi"]
    plan = realignments(
        user, [(list(three), 2), (["x", "y", "z"], 1)], lambda a, b: np.zeros((len(a), len(b)))
    )
    assert [r.search_only for r in plan] == [True, True]
    members = {
        plan[0].label_set: [(1, np.full(4, 1.0), list(three)), (2, np.full(4, 2.0), list(three))],
        plan[1].label_set: [(7, np.full(4, 7.0), ["x", "y", "z"])],
    }
    flipped = np.eye(3)[::-1]  # the user's first class is the learnware's last
    searched = with_searched(
        plan, lambda r: members[r.label_set], lambda chosen: [flipped for _ in chosen], limit=2
    )
    assert [(r.names, r.learnwares, r.search_only) for r in searched] == [
        (("positive", "neutral", "negative"), frozenset({1, 2}), False)
    ]
    own = [Candidate(1, 0.01, three), Candidate(2, 0.02, three)]
    scored = with_alignment(own, [Candidate(2, 0.25, three, reading=True, searched=True)])
    top = rank_for_task(by_tier(scored, user), user)[0]
    assert top.id == 2 and top.reason(0, user, three).endswith(
        "(your task's spec refitted under its label names, your labels aligned with its classes as its spec "
        "agrees most)"
    )


def test_near_copies_name_each_copy_s_group_head_and_a_client_checks_one_of_each() -> None:
    """What the API marks as `spec_copy_of`, and how a client without the specs uses it."""
    rng = np.random.default_rng(1)
    good, other = np.sign(rng.standard_normal(64)), np.sign(rng.standard_normal(64))
    near = good.copy()
    near[:2] *= -1  # two of 64 signs flipped: cosine 0.94, just under the mark
    vectors = {1: good, 10: good, 11: good.copy(), 2: other, 12: -other, 13: near}
    assert near_copies([1, 10, 11, 2, 12, 13, 99], vectors) == {10: 1, 11: 1}
    assert near_copies([10, 1], vectors) == {1: 10}  # the head is whichever is listed first
    names = ("ham", "spam")
    ordered = [Candidate(i, 0.5, names) for i in (1, 10, 11, 2, 13)]
    marks = near_copies([c.id for c in ordered], vectors)
    assert choose_checked(ordered, list(names), {}, k=5, copies=marks) == [1, 2, 13]
    assert choose_checked(ordered, list(names), {}, k=5, copies=marks) == choose_checked(
        ordered, list(names), vectors, k=5
    )
    # A copy of a learnware that cannot answer (fewer classes than the user's) still gets a place.
    mixed = [Candidate(3, 0.9, ("only",)), *ordered[1:3]]
    assert choose_checked(mixed, list(names), {}, k=5, copies={10: 3, 11: 3}) == [10]
