"""Kinds of user task for the identification benchmark, and the dock's ranking as the service runs it.

Each kind is its own row (BENCHMARK.md, "Identification"); the headline is the mean over kinds:

- ``same names``: 8 shots per class, the classes named as the learnwares name them;
- ``synonyms``, ``codes``, ``case and order``, ``french``: the same shots with the classes named
  otherwise ("good" for "positive"; "0", "1"; "POSITIVE" with the label ids in another order;
  "positif");
- ``other wording``, ``german``: held out, written after the ranking's rules and margins were
  chosen (2026-12-06): the names as people tag data ("neg", TREC's "enty", OLID's "NOT" / "OFF",
  "sad" for "sadness") and a third language ("negativ", "Wut");
- ``codes, renumbered``: codes that do not follow the task's own numbering (the classes shifted
  round by a seed's offset, so no code k is class k): a rule that reads "3" as a learnware's
  class 3 is wrong for every label here (one such rule was tried and not kept: it lifted
  ``codes`` and sank this kind, docs/benchmarks/identification.md);
- ``letters``: the classes named "A", "B", "C"… in the task's order (tasks of at most 26
  classes), as an answer sheet or a spreadsheet column names them. Written (2026-12-07) with the
  rule that reads letters as numbers, A as class 0, so this order is read by construction;
  letters in another order are read as renumbered codes are, or fall back to the search, as
  every lettered user did before;
- ``unseen examples``: 8 shots per class named as the learnwares name them, drawn from the
  train examples no learnware of the market trained on (outside the capped training set every
  variant of a task draws from). Where the whole train split is within the cap (9 of the full
  profile's 25 tasks), or a class has no such example, they are drawn from the test split
  instead and left out of that user's test (``User.held_out``). Every other kind draws its
  shots from the whole train split (BENCHMARK.md), so a user's examples are often ones the
  task's own learnwares trained on, and a model that memorises flatters itself on them (a
  TF-IDF learnware of the user's own task answered the same-names users' shots 0.156 better
  than its test split, one of another task 0.012: `bench identify-replay --flattery`). This kind is the user who brings data of
  their own (written 2026-12-07, after every rule of the ranking was chosen);
- ``4 shots``, ``16 shots``: fewer or more examples per class;
- ``label subset``: half the classes (at least two) of a task with four or more, named as the
  learnware names them: a learnware of the whole task serves by restricting its answers;
- ``label subset, synonyms``: the same classes named otherwise, so the subset must be found by
  the names' meaning, or by the examples at the price the names put on the map (`map_cost`);
- ``superset``: the same-names users of a task whose labels contain another market task's (five
  sentiment grades hold "negative" and "positive"): the smaller task's learnwares cannot answer
  them, however close their specs;
- ``no own learnware``: every learnware of the user's task removed, the best of the rest that
  answers the user's labels is the oracle;
- ``spec only``: the user uploads a locally fitted spec and keeps the examples (no shot check).

A user's accuracy with a learnware is measured on the test split of their classes, through the
label map the dock reports for it (a wrong map costs what it would cost the user); the oracle is
the best learnware in hindsight under the map a person would accept (equal names), or the
top-1 under the dock's map where that does better.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from app.ml.agreement import (
    agreement_chosen,
    agreement_scores,
    checked_peers,
    mapped_answers,
    pooled_inputs,
    user_answers,
)
from app.ml.data import TextTask, few_shot
from app.ml.label_maps import LabelMap, Tier, answers, label_set, map_by_name, normalise_label, tier_of
from app.ml.ranking import (
    SHOT_CHECK_K,
    SHOT_CHECK_K_UNNAMED,
    Candidate,
    Ranked,
    Realignment,
    ShotScore,
    aligned_score,
    by_tier,
    check_count,
    check_predicted,
    choose_checked,
    originals_first,
    rank_for_task,
    realignments,
    with_alignment,
    with_searched,
)

if TYPE_CHECKING:
    from app.ml.runners.base import Predictions
    from app.ml.spec_space import SpecSpace


class LearnwareView(Protocol):
    id: int
    task: str
    variant: str
    label_names: list[str]
    inputs: list[str]
    """The inputs its package declares (the dock runs it on them)."""

    @property
    def key(self) -> str: ...


class Market(Protocol):
    """What the kinds need of the benchmark's market (`app.bench.identification.Market`)."""

    tasks: dict[str, TextTask]
    tests: dict[str, TextTask]

    @property
    def learnwares(self) -> Sequence[LearnwareView]: ...

    def predict(self, lw: Any, texts: list[str]) -> Predictions: ...

    def predict_declared(self, lw: Any, texts: list[str]) -> Predictions:
        """``predict`` on declared inputs, each answer remembered for the next user."""
        ...

    def test_predictions(self, lw: Any, task: str) -> Predictions: ...

    def unseen(self, task: str) -> TextTask | None:
        """The task's train examples no learnware of the market trained on (None: none left)."""
        ...


# Users who name their classes differently from the learnwares (held-back cases of BENCHMARK.md).
SYNONYMS = {
    "negative": "bad", "positive": "good", "neutral": "so-so", "very negative": "terrible",
    "very positive": "excellent", "ham": "normal message", "spam": "junk message",
    "subjective": "opinion", "objective": "fact", "world": "international", "sports": "athletics",
    "business": "economy", "science and technology": "tech", "description": "explanation",
    "entity": "thing", "abbreviation": "acronym", "human": "person", "location": "place",
    "number": "quantity", "anger": "rage", "joy": "happiness", "optimism": "hope",
    "sadness": "sorrow", "not hate": "harmless", "hate": "hateful", "non irony": "sincere",
    "irony": "sarcasm", "not offensive": "polite", "offensive": "insulting",
    "unacceptable": "ungrammatical", "acceptable": "grammatical", "entailment": "implied",
    "not entailment": "not implied", "hate speech": "hateful speech",
    "offensive language": "rude language", "neither": "normal", "none": "unrelated",
    "against": "opposed", "favor": "supportive",
}  # fmt: skip
FRENCH = {
    "negative": "négatif", "positive": "positif", "neutral": "neutre", "very negative": "très négatif",
    "very positive": "très positif", "ham": "message normal", "spam": "pourriel",
    "subjective": "subjectif", "objective": "objectif", "world": "monde", "sports": "sport",
    "business": "économie", "science and technology": "sciences et technologie",
    "description": "description", "entity": "entité", "abbreviation": "abréviation",
    "human": "humain", "location": "lieu", "number": "nombre", "anger": "colère", "joy": "joie",
    "optimism": "optimisme", "sadness": "tristesse", "not hate": "pas de haine", "hate": "haine",
    "non irony": "sans ironie", "irony": "ironie", "not offensive": "pas offensant",
    "offensive": "offensant", "unacceptable": "inacceptable", "acceptable": "acceptable",
    "entailment": "implication", "not entailment": "pas d'implication",
    "hate speech": "discours haineux", "offensive language": "langage offensant",
    "neither": "aucun des deux", "none": "aucun", "against": "contre", "favor": "pour",
}  # fmt: skip
# Held out: written after every rule and margin of the ranking was chosen (2026-12-06), to see
# whether they hold on wordings nobody tuned them for. How people tag data (abbreviations and
# the datasets' own short tags, TREC's "desc" / "enty", OLID's "NOT" / "OFF"; adjectives for
# nouns; negations), and a third language.
WORDING = {
    "negative": "neg", "positive": "pos", "neutral": "neu", "very negative": "very neg",
    "very positive": "very pos", "ham": "legitimate", "spam": "unsolicited",
    "subjective": "opinionated", "objective": "factual", "world": "world news",
    "sports": "sport news", "business": "finance", "science and technology": "sci/tech",
    "description": "desc", "entity": "enty", "abbreviation": "abbr", "human": "hum",
    "location": "loc", "number": "num", "anger": "angry", "joy": "joyful",
    "optimism": "optimistic", "sadness": "sad", "not hate": "no hate", "hate": "hate speech",
    "non irony": "not ironic", "irony": "ironic", "not offensive": "NOT", "offensive": "OFF",
    "unacceptable": "incorrect", "acceptable": "correct", "entailment": "entails",
    "not entailment": "does not entail", "hate speech": "hateful", "offensive language": "offensive",
    "neither": "clean", "none": "no stance", "against": "con", "favor": "pro",
}  # fmt: skip
GERMAN = {
    "negative": "negativ", "positive": "positiv", "neutral": "neutral", "very negative": "sehr negativ",
    "very positive": "sehr positiv", "ham": "normale Nachricht", "spam": "Werbung",
    "subjective": "subjektiv", "objective": "objektiv", "world": "Welt", "sports": "Sport",
    "business": "Wirtschaft", "science and technology": "Wissenschaft und Technik",
    "description": "Beschreibung", "entity": "Entität", "abbreviation": "Abkürzung",
    "human": "Mensch", "location": "Ort", "number": "Zahl", "anger": "Wut", "joy": "Freude",
    "optimism": "Optimismus", "sadness": "Traurigkeit", "not hate": "kein Hass", "hate": "Hass",
    "non irony": "keine Ironie", "irony": "Ironie", "not offensive": "nicht beleidigend",
    "offensive": "beleidigend", "unacceptable": "inakzeptabel", "acceptable": "akzeptabel",
    "entailment": "Folgerung", "not entailment": "keine Folgerung", "hate speech": "Hassrede",
    "offensive language": "beleidigende Sprache", "neither": "weder noch", "none": "keine",
    "against": "dagegen", "favor": "dafür",
}  # fmt: skip

RENAMINGS = {"synonyms": SYNONYMS, "french": FRENCH, "other wording": WORDING, "german": GERMAN}
"""The kinds whose users rename every class of their task by a table (a name it lacks gets " class")."""

KINDS = (
    "same names",
    "synonyms",
    "codes",
    "codes, renumbered",
    "letters",
    "unseen examples",
    "case and order",
    "french",
    "other wording",
    "german",
    "4 shots",
    "16 shots",
    "label subset",
    "label subset, synonyms",
    "superset",
    "no own learnware",
    "spec only",
)


@dataclass(frozen=True)
class User:
    """One user task: the shots as the user names them, and how they relate to the real task."""

    kind: str
    task: str
    seed: int
    shots: TextTask
    """Texts, labels in the user's ids, the user's label names."""
    classes: tuple[int, ...]
    """The task's label id of each user label (renamings keep the meaning, reorderings permute)."""
    exclude: frozenset[int] = frozenset()
    """Learnware ids the user's market does not have."""
    spec_only: bool = False
    held_out: frozenset[int] = frozenset()
    """Positions in the task's test split left out of this user's test: its own examples, where
    they were drawn from there (``unseen examples``)."""


def _renamed(names: list[str], table: dict[str, str]) -> list[str]:
    return [table.get(n, f"{n} class") for n in names]


def _relabel(shots: TextTask, classes: list[int], names: list[str]) -> TextTask:
    """Shots of the task's ``classes`` only, labels re-expressed as positions in ``classes``."""
    position = {c: i for i, c in enumerate(classes)}
    keep = [i for i, y in enumerate(shots.labels.tolist()) if y in position]
    labels = np.asarray([position[int(shots.labels[i])] for i in keep], dtype=np.int64)
    return TextTask(shots.name, shots.split, [shots.texts[i] for i in keep], labels, names)


def users(market: Market, seeds: tuple[int, ...], kinds: tuple[str, ...] = KINDS) -> Iterator[User]:
    """Every user of every kind, task and seed (kinds that do not apply to a task are skipped)."""
    for task_name, train in market.tasks.items():
        names = list(train.label_names)
        every = list(range(len(names)))
        own = frozenset(lw.id for lw in market.learnwares if lw.task == task_name)
        mine = {normalise_label(n) for n in names}
        contains_another = any(
            {normalise_label(n) for n in other.label_names} < mine
            for other_name, other in market.tasks.items()
            if other_name != task_name
        )
        for seed in seeds:
            shots8 = few_shot(train, per_class=8, max_total=64, seed=seed)
            present = sorted(set(shots8.labels.tolist()))
            for kind in kinds:
                if kind == "same names":
                    yield User(kind, task_name, seed, _relabel(shots8, every, names), tuple(every))
                elif kind in RENAMINGS:
                    table = RENAMINGS[kind]
                    yield User(
                        kind, task_name, seed, _relabel(shots8, every, _renamed(names, table)), tuple(every)
                    )
                elif kind == "codes":
                    codes = [str(i) for i in every]
                    yield User(kind, task_name, seed, _relabel(shots8, every, codes), tuple(every))
                elif kind == "codes, renumbered":
                    shift = int(np.random.default_rng([seed, 2718]).integers(1, len(every)))
                    shifted = every[shift:] + every[:shift]  # code i is class shifted[i] != i
                    codes = [str(i) for i in every]
                    yield User(kind, task_name, seed, _relabel(shots8, shifted, codes), tuple(shifted))
                elif kind == "letters" and len(names) <= 26:
                    letters = [chr(ord("A") + c) for c in every]
                    yield User(kind, task_name, seed, _relabel(shots8, every, letters), tuple(every))
                elif kind == "unseen examples":
                    fresh = market.unseen(task_name)
                    if fresh is not None and set(fresh.labels.tolist()) == set(every):
                        shots = few_shot(fresh, per_class=8, max_total=64, seed=seed)
                        yield User(kind, task_name, seed, _relabel(shots, every, names), tuple(every))
                        continue
                    test = market.tests[task_name]
                    shots = few_shot(test, per_class=8, max_total=64, seed=seed)
                    theirs = set(shots.texts)
                    held_out = frozenset(i for i, text in enumerate(test.texts) if text in theirs)
                    relabelled = _relabel(shots, every, names)
                    yield User(kind, task_name, seed, relabelled, tuple(every), held_out=held_out)
                elif kind == "case and order":
                    order = every[::-1]
                    upper = [names[c].upper() for c in order]
                    yield User(kind, task_name, seed, _relabel(shots8, order, upper), tuple(order))
                elif kind in ("4 shots", "16 shots"):
                    per_class = int(kind.split()[0])
                    shots = few_shot(train, per_class=per_class, max_total=64, seed=seed)
                    yield User(kind, task_name, seed, _relabel(shots, every, names), tuple(every))
                elif kind.startswith("label subset") and len(names) >= 4 and len(present) >= 4:
                    rng = np.random.default_rng([seed, 4242])  # both subset kinds: the same classes
                    chosen = sorted(
                        rng.choice(present, size=max(2, len(present) // 2), replace=False).tolist()
                    )
                    few = few_shot(train.subset(np.flatnonzero(np.isin(train.labels, chosen))), seed=seed)
                    subset_names = [names[c] for c in chosen]
                    if kind.endswith("synonyms"):
                        subset_names = _renamed(subset_names, SYNONYMS)
                    yield User(kind, task_name, seed, _relabel(few, chosen, subset_names), tuple(chosen))
                elif kind == "superset" and contains_another:
                    yield User(kind, task_name, seed, _relabel(shots8, every, names), tuple(every))
                elif kind == "no own learnware":
                    yield User(
                        kind, task_name, seed, _relabel(shots8, every, names), tuple(every), exclude=own
                    )
                elif kind == "spec only":
                    yield User(
                        kind, task_name, seed, _relabel(shots8, every, names), tuple(every), spec_only=True
                    )


def true_names(market: Market, user: User) -> list[str]:
    """The user's labels under the names the task itself gives them."""
    names = market.tasks[user.task].label_names
    return [names[c] for c in user.classes]


def service_ranking(
    market: Market,
    user: User,
    user_spec: np.ndarray,
    specs: dict[int, np.ndarray],
    space: SpecSpace,
    shot_check_k: int = SHOT_CHECK_K,
    shot_check_k_unnamed: int = SHOT_CHECK_K_UNNAMED,
    realign_seconds: list[tuple[int, float, int]] | None = None,
    checked_here: int = 0,
    checks: dict[int, tuple[LabelMap, ShotScore] | None] | None = None,
    agreement_k: int | None = None,
    found: dict[str, list[Candidate]] | None = None,
) -> list[Ranked]:
    """The dock's order for this user: tiers and cosine, then the shot check (for a spec-only
    user, the close matches' agreement on their declared inputs instead: `peer_agreement`),
    through the same functions the service's worker calls, with label names compared by
    ``space``'s frozen base. Where the user's spec is refitted under other label sets, (how many,
    seconds) is appended to ``realign_seconds``.

    ``checked_here``: for a spec-only user, the order `pavedock task --local` shows instead: the
    dock's first ``checked_here`` matches checked on the user's machine (`DockClient.check_here`:
    the same check on the dock's order, copies told apart by the marks the dock puts on them).

    ``checks``: the check's results by learnware, kept between calls for the same user (a
    ranking under another check width runs only the learnwares the first did not); ``found``
    likewise keeps the candidates the index and the refits found (refitted once a user).
    ``agreement_k``: how many checked matches weigh in by their agreement (`checked_peers`;
    ``shot_check_k`` where None, as the worker does)."""
    from app.ml.identify import rank_specs

    names = list(user.shots.label_names)
    pool = {i: v for i, v in specs.items() if i not in user.exclude}
    memo = {} if found is None else found
    if "candidates" not in memo:
        near = [
            Candidate(m.id, m.score, tuple(market.learnwares[m.id].label_names))
            for m in rank_specs(user_spec, pool)
        ]
        if not user.spec_only:  # a spec-only user's examples never reach the dock: nothing to refit
            near = with_alignment(
                near, realigned_candidates(market, user, user_spec, pool, space, realign_seconds)
            )
        memo["candidates"] = originals_first(by_tier(near, names), names, pool)
    candidates = memo["candidates"]
    maps: dict[int, LabelMap | None] = {}
    shots: dict[int, ShotScore | None] = {}
    vectors: dict[int, np.ndarray] = pool
    if user.spec_only and checked_here:  # the dock's shown matches, its copies marked (`spec_copy_of`)
        candidates = candidates[:checked_here]
        vectors = {c.id: pool[c.id] for c in candidates if c.id in pool}
    check = (
        0
        if user.spec_only and not checked_here
        else check_count(candidates, names, shot_check_k, shot_check_k_unnamed)
    )
    done = {} if checks is None else checks
    for lw_id in choose_checked(candidates, names, vectors, check) if check else ():
        if lw_id not in done:
            lw = market.learnwares[lw_id]
            predicted = market.predict(lw, user.shots.texts)
            done[lw_id] = check_predicted(
                names,
                lw.label_names,
                predicted.labels,
                predicted.probs,
                user.shots.labels,
                name_similarity=space.name_similarity,
                temperature=space.config.temperature,
            )
        if (checked := done[lw_id]) is not None:
            maps[lw_id], shots[lw_id] = checked
    if user.spec_only and not checked_here:
        agreement = peer_agreement(market, candidates, names, vectors, shot_check_k)
        return rank_for_task(candidates, names, agreement=agreement)
    ranked = rank_for_task(candidates, names, maps=maps, shots=shots)
    peers = checked_peers(ranked, shot_check_k if agreement_k is None else agreement_k)
    if not peers:
        return ranked
    return rank_for_task(
        candidates,
        names,
        maps=maps,
        shots=shots,
        agreement=checked_agreement(market, ranked, peers, len(names)),
    )


def checked_agreement(
    market: Market, ranked: list[Ranked], peers: list[int], n_labels: int
) -> dict[int, float]:
    """What the worker weighs the shot check's scores with (`app.ml.agreement.checked_peers`): the
    checked matches run on their pooled declared inputs, answering through the maps their check
    chose."""
    maps = {r.id: r.label_map for r in ranked if r.id in peers}
    texts = pooled_inputs([market.learnwares[i].inputs for i in peers])
    answered = {}
    for i in peers:
        label_map = maps[i]
        assert label_map is not None
        predicted = market.predict_declared(market.learnwares[i], texts)
        answered[i] = mapped_answers(predicted.labels, predicted.probs, label_map)
    return agreement_scores(answered, n_labels)


def peer_agreement(
    market: Market,
    candidates: list[Candidate],
    names: list[str],
    vectors: dict[int, np.ndarray],
    k: int,
) -> dict[int, float]:
    """What the worker scores a spec-only task's close matches by (`app.ml.agreement`): the first
    ``k`` that answer the user's labels by name, each run on their pooled declared inputs."""
    peers = agreement_chosen(candidates, names, vectors, k)
    if not peers:
        return {}
    texts = pooled_inputs([market.learnwares[i].inputs for i in peers])
    answered = {}
    for i in peers:
        lw = market.learnwares[i]
        predicted = market.predict_declared(lw, texts)
        answered[i] = user_answers(predicted.labels, predicted.probs, names, lw.label_names)
    return agreement_scores(answered, len(names))


def realigned_candidates(
    market: Market,
    user: User,
    user_spec: np.ndarray,
    pool: dict[int, np.ndarray],
    space: SpecSpace,
    seconds: list[tuple[int, float, int]] | None = None,
) -> list[Candidate]:
    """The learnwares of the label sets `realignments` plans for this user, each scored by its
    cosine with the user's spec refitted under the planned names (`aligned_score`), as the
    service's `find_candidates` scores them (exactly, over the whole set: the market is small).
    A reading of numbered codes is searched as the service searches it (`with_searched`): the
    learnwares of its label set closest to the user's own spec ``user_spec`` first."""
    from collections import Counter

    from app.ml.identify import rank_specs
    from app.ml.pave import alignment_gains, fit_realigned_specs, realignable

    if not realignable(space.config.recipe):
        return []
    names = list(user.shots.label_names)
    members = [market.learnwares[i] for i in pool]
    counts = Counter(tuple(lw.label_names) for lw in members)
    plan = realignments(names, list(counts.items()), space.name_similarity)
    if not plan:
        return []
    started = time.perf_counter()

    def members_of(reading: Realignment) -> list[tuple[int, np.ndarray, list[str]]]:
        of_set = {lw.id: pool[lw.id] for lw in members if label_set(lw.label_names) == reading.label_set}
        return [
            (m.id, of_set[m.id], market.learnwares[m.id].label_names) for m in rank_specs(user_spec, of_set)
        ]

    plan = with_searched(
        plan,
        members_of,
        lambda chosen: alignment_gains(space, user.shots.texts, user.shots.labels, len(names), chosen),
    )
    vectors = fit_realigned_specs(space, user.shots.texts, user.shots.labels, [r.names for r in plan])
    if seconds is not None:
        searched = sum(len(r.learnwares) for r in plan if r.learnwares is not None)
        seconds.append((len(plan), time.perf_counter() - started, searched))
    out: list[Candidate] = []
    for realignment, vector in zip(plan, vectors, strict=True):
        of_set = {
            lw.id: pool[lw.id]
            for lw in members
            if label_set(lw.label_names) == realignment.label_set
            and (realignment.learnwares is None or lw.id in realignment.learnwares)
        }
        out += [
            Candidate(
                m.id,
                aligned_score(realignment, m.score),
                tuple(market.learnwares[m.id].label_names),
                reading=realignment.reading,
                searched=realignment.learnwares is not None,
            )
            for m in rank_specs(vector, of_set)
        ]
    return out


def user_accuracy(market: Market, user: User, lw_id: int, label_map: LabelMap | None) -> float:
    """Test accuracy on the user's classes of a learnware read through ``label_map`` (0 without)."""
    if label_map is None:
        return 0.0
    lw = market.learnwares[lw_id]
    test = market.tests[user.task]
    mine = np.isin(test.labels, user.classes)
    if user.held_out:
        mine[list(user.held_out)] = False
    keep = np.flatnonzero(mine)
    position = {c: i for i, c in enumerate(user.classes)}
    truth = np.asarray([position[int(y)] for y in test.labels[keep]], dtype=np.int64)
    predicted = market.test_predictions(lw, user.task)
    probs = None if predicted.probs is None else predicted.probs[keep]
    user_pred, _ = answers(predicted.labels[keep], probs, label_map)
    return float(np.mean(user_pred == truth))


def measure(market: Market, user: User, ranked: list[Ranked]) -> dict[str, float]:
    """Oracle agreement, normalised accuracy, quality filter and hits of one user's ranking."""
    truth = true_names(market, user)
    serving = {
        lw.id: user_accuracy(market, user, lw.id, map_by_name(truth, lw.label_names))
        for lw in market.learnwares
        if lw.id not in user.exclude and tier_of(truth, lw.label_names) == Tier.BY_NAME
    }
    top = ranked[0]
    accuracy = user_accuracy(market, user, top.id, top.label_map)
    # The best in hindsight is at least what the dock gave: a top-1 read through a map chosen by
    # the examples can beat every learnware read by name (seen with the smoke profile's tiny models).
    oracle = max(*serving.values(), accuracy) if serving else 0.0
    position = {r.id: i for i, r in enumerate(ranked)}
    own = {lw.variant: lw.id for lw in market.learnwares if lw.task == user.task}
    metrics = {
        "oracle_agreement_at1": float(accuracy >= oracle - 0.01) if oracle > 0 else float("nan"),
        "normalized_accuracy": accuracy / oracle if oracle > 0 else float("nan"),
        "top1_accuracy": accuracy,
        "oracle_accuracy": oracle,
        "hit_at1": float(top.id == own.get("good")),
    }
    good, bad = own.get("good"), own.get("corrupted")
    if good in position and bad in position:
        metrics["quality_filter"] = float(position[good] < position[bad])
    else:
        metrics["quality_filter"] = float("nan")
    return metrics


class KindAndSeed(Protocol):
    """What `summarise` reads of a user."""

    @property
    def kind(self) -> str: ...

    @property
    def seed(self) -> int: ...


def summarise(rows: Sequence[tuple[KindAndSeed, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per kind: the mean of each measure and its spread (std over user seeds of the seed means)."""
    out: dict[str, dict[str, float]] = {}
    for kind in dict.fromkeys(u.kind for u, _ in rows):
        mine = [(u, m) for u, m in rows if u.kind == kind]
        entry: dict[str, float] = {"users": float(len(mine))}
        for key in ("oracle_agreement_at1", "normalized_accuracy", "quality_filter", "hit_at1"):
            values = np.asarray([m[key] for _, m in mine], dtype=np.float64)
            entry[key] = float(np.nanmean(values)) if np.any(~np.isnan(values)) else float("nan")
            by_seed = [
                [m[key] for u, m in mine if u.seed == s and not np.isnan(m[key])]
                for s in sorted({u.seed for u, _ in mine})
            ]
            per_seed = [float(np.mean(seed)) for seed in by_seed if seed]  # a seed with no value is left out
            entry[f"{key}_spread"] = float(np.std(per_seed)) if len(per_seed) > 1 else 0.0
        out[kind] = entry
    kinds = list(out)
    out["mean over kinds"] = {
        key: float(np.nanmean([out[k][key] for k in kinds]))
        for key in ("oracle_agreement_at1", "normalized_accuracy", "quality_filter", "hit_at1")
    }
    out["mean over kinds"]["users"] = float(len(rows))
    return out
