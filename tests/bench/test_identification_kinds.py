"""The identification benchmark's kinds of user task, generated from real datasets: which users
each kind yields and how they name their classes (no model is trained here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from app.bench import identification_kinds as kinds
from app.bench.identification import COVER_TASKS, PROFILES
from app.ml.data import TextTask, load_task
from app.ml.label_maps import Tier, normalise_label, tier_of


@dataclass
class _Learnware:
    id: int
    task: str
    variant: str
    label_names: list[str]


class _Market:
    """The part of the benchmark's market `kinds.users` reads: tasks and who holds which."""

    def __init__(self, datasets: Path, names: tuple[str, ...]):
        self.tasks: dict[str, TextTask] = {
            n: load_task(datasets, n, "train", limit=600, seed=0) for n in names
        }
        self.tests = self.tasks
        self.learnwares = [
            _Learnware(i, n, "good", list(self.tasks[n].label_names)) for i, n in enumerate(names)
        ]

    def unseen(self, task: str) -> TextTask | None:
        """As if every learnware trained on its task's first 300 examples, and tweet_sentiment's
        on all of them."""
        train = self.tasks[task]
        return None if task == "tweet_sentiment" else train.subset(list(range(300, len(train))))


@pytest.fixture(scope="module")
def market(datasets_dir: Path) -> _Market:
    return _Market(datasets_dir, ("sst2", "tweet_sentiment", "trec"))


def test_superset_users_are_those_whose_labels_contain_another_tasks(market: _Market) -> None:
    supersets = [u for u in kinds.users(market, (0, 1)) if u.kind == "superset"]
    assert {u.task for u in supersets} == {"tweet_sentiment"}  # "negative", "positive" ⊂ its three
    assert len(supersets) == 2
    sst2 = market.learnwares[0]
    for user in supersets:
        assert user.shots.label_names == market.tasks["tweet_sentiment"].label_names
        assert tier_of(user.shots.label_names, sst2.label_names) == Tier.CANNOT


def test_renamed_subset_users_ask_for_the_same_classes_under_other_names(market: _Market) -> None:
    users = list(kinds.users(market, (0, 1, 2)))
    plain = {(u.task, u.seed): u for u in users if u.kind == "label subset"}
    renamed = {(u.task, u.seed): u for u in users if u.kind == "label subset, synonyms"}
    assert set(plain) == set(renamed) == {("trec", s) for s in (0, 1, 2)}  # four classes or more
    trec = market.tasks["trec"].label_names
    for key, user in renamed.items():
        assert user.classes == plain[key].classes and 2 <= len(user.classes) < len(trec)
        assert list(user.shots.labels) == list(plain[key].shots.labels)
        wanted = [kinds.SYNONYMS[trec[c]] for c in user.classes]
        assert user.shots.label_names == wanted
        assert not {normalise_label(n) for n in wanted} & {normalise_label(n) for n in trec}
        assert tier_of(user.shots.label_names, trec) == Tier.LABEL_MAP


def test_the_cover_profile_holds_label_sets_that_contain_one_another(datasets_dir: Path) -> None:
    profile = PROFILES["cover"]
    assert profile.tasks == COVER_TASKS
    names = {
        n: {normalise_label(x) for x in load_task(datasets_dir, n, "test", limit=1).label_names}
        for n in COVER_TASKS
    }
    assert names["sst2"] < names["tweet_sentiment"] < names["sst5"]
    assert len(names["banking77"]) == 77 and len(names["clinc150"]) == 150


def test_renumbered_codes_never_read_as_the_task_numbers_them(market: _Market) -> None:
    """The codes users number classes as the task does ("3" is class 3, the numbers' reading);
    the renumbered ones shift every class, so that reading is wrong for each of their labels."""
    users = list(kinds.users(market, (0, 1, 2)))
    coded = {(u.task, u.seed): u for u in users if u.kind == "codes"}
    renumbered = {(u.task, u.seed): u for u in users if u.kind == "codes, renumbered"}
    assert set(coded) == set(renumbered) == {(t, s) for t in market.tasks for s in (0, 1, 2)}
    for key, user in renumbered.items():
        n = len(market.tasks[key[0]].label_names)
        assert user.shots.label_names == coded[key].shots.label_names == [str(i) for i in range(n)]
        assert coded[key].classes == tuple(range(n))
        assert sorted(user.classes) == list(range(n))
        assert all(c != i for i, c in enumerate(user.classes))
        # The same examples, each labelled with the code of its class.
        truth = [user.classes[y] for y in user.shots.labels]
        assert sorted(truth) == sorted(coded[key].shots.labels.tolist())


def test_letters_name_the_classes_in_the_task_order(market: _Market) -> None:
    """Letter A is the task's class 0, as an answer sheet names them; the same examples as the codes'."""
    users = list(kinds.users(market, (0, 1), ("codes", "letters")))
    coded = {(u.task, u.seed): u for u in users if u.kind == "codes"}
    lettered = {(u.task, u.seed): u for u in users if u.kind == "letters"}
    assert set(lettered) == set(coded)
    for key, user in lettered.items():
        n = len(market.tasks[key[0]].label_names)
        assert user.shots.label_names == [chr(ord("A") + i) for i in range(n)]
        assert user.classes == coded[key].classes == tuple(range(n))
        assert list(user.shots.labels) == list(coded[key].shots.labels)


def test_unseen_examples_users_bring_examples_no_learnware_trained_on(market: _Market) -> None:
    """Named as the task names its classes, 8 shots a class, every one from the examples no
    learnware saw: the train examples beyond the cap, or, where the learnwares trained on the
    whole split (tweet_sentiment here), the test split, those examples then left out of the test."""
    users = list(kinds.users(market, (0, 1), ("unseen examples",)))
    assert {(u.task, u.seed) for u in users} == {(t, s) for t in market.tasks for s in (0, 1)}
    for user in users:
        task = market.tasks[user.task]
        assert user.shots.label_names == task.label_names
        assert user.classes == tuple(range(len(task.label_names)))
        assert np.bincount(user.shots.labels).max() <= 8
        if user.task == "tweet_sentiment":
            test = market.tests[user.task]
            assert user.held_out and {test.texts[i] for i in user.held_out} == set(user.shots.texts)
        else:
            assert not user.held_out and not set(task.texts[:300]) & set(user.shots.texts)


def test_a_users_held_out_examples_are_left_out_of_their_test(
    market: _Market, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scored on the test split less the examples the user holds: a learnware right on exactly
    those examples and wrong elsewhere scores 0."""
    from app.bench.identification_kinds import User, user_accuracy
    from app.ml.label_maps import map_by_name
    from app.ml.runners.base import Predictions

    test = market.tests["sst2"]
    held = frozenset(range(0, len(test), 2))
    # Right on the held-out half only.
    labels = np.where(np.isin(np.arange(len(test)), list(held)), test.labels, 1 - test.labels)
    monkeypatch.setattr(market, "test_predictions", lambda lw, task: Predictions(labels, None), raising=False)
    names = list(test.label_names)
    user = User("unseen examples", "sst2", 0, test, (0, 1), held_out=held)
    everyone = User("same names", "sst2", 0, test, (0, 1))
    label_map = map_by_name(names, names)
    assert user_accuracy(market, user, 0, label_map) == 0.0  # type: ignore[arg-type]
    assert user_accuracy(market, everyone, 0, label_map) == pytest.approx(len(held) / len(test))  # type: ignore[arg-type]
