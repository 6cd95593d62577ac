"""How the dock orders the learnwares it finds for a user's task, and why each is where it is.

The spec's cosine says which learnwares do the user's *kind* of task. Three more facts decide
whether a learnware can serve the user and how well:

1. **What it can answer** (its tier). A learnware answers the user's labels *by name* when every
   one of them is among its own (equal sets, or a superset whose answers are restricted to the
   user's labels); it *may answer through a label map* when it has at least as many classes
   under other names; it *cannot answer* with fewer classes than the user has labels.
2. **Which label map** turns its answers into the user's labels: by name, by meaning, or by
   the user's examples, each map paying for what it could not have known in advance
   (`app.ml.label_maps`, whose docstring tells how).
3. **How it does on the user's examples** (the shot check): while the dock holds a few-shot
   task's examples it runs a few of the top candidates on them under their label maps. The
   candidates are picked so that near-identical specs (copies, floods) take one place, not all.

The order, as the API documents it: checked matches that did better than chance (a score above a
uniform guess's, log 1 / the user's label count), by the mean
log-probability they gave the user's labels (a proper score: a model that is right by luck on a
handful of easy examples, but unsure, loses to one that is right and sure) less the cost of a
label map the examples chose (`map_cost`: the map's description length per example, so a
larger model restricted to a few of its classes, one of many maps that could fit a handful of
examples, does not win on a lucky fit, and a map the names argue against costs the most), where
at least three were checked that way plus how much each of the first five is borne out by the
others on their declared inputs (their mean κ, `AGREEMENT_WEIGHT` nats a unit:
`weighed_by_agreement`, `app.ml.agreement`); then
the unchecked ones that answer the user's labels by name, in cosine order (for a spec-only task,
whose examples the dock never saw, its close matches first by how much the others bear them out
on their declared inputs: `app.ml.agreement`); then checked matches
that did no better than chance, in cosine order (a check no better than a guess is no evidence
either way, so the spec decides among them: `rank_for_task`); then the unchecked ones that would
need a label map (none was chosen: the user could not read their answers), in cosine order; then
those that cannot answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import linear_sum_assignment

from app.ml.label_maps import (
    FLOOR_SHARE_OF_CHANCE,
    LabelMap,
    Tier,
    answers,
    choose_label_map,
    code_order,
    label_set,
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

SHOT_CHECK_K = 5
"""How many candidates the shot check runs on the user's examples when some learnware answers the
user's labels by name."""

SHOT_CHECK_K_UNNAMED = 20
"""How many it runs when none does (codes, another language, unusual names): the spec, fitted
under the user's names, then says less about which learnware fits, so the check looks wider.
On the quick identification benchmark 5 / 12 / 20 gave a mean normalised accuracy of
0.965 / 0.977 / 0.982 (`docs/benchmarks/identification.md`); chosen there."""

DUPLICATE_COSINE = 0.95
"""Specs at least this close are one candidate for the shot check (copies, floods). Distinct
learnwares of one task score well below it (same task ≈ 0.1–0.6 on the benchmark)."""

PER_CLUSTER = 1
"""How many learnwares of one cluster of near-identical specs the shot check runs (the oldest)."""

ALIGN_MAX_LABEL_SETS = 16
"""At most this many label sets a task's spec is refitted under (`realignments`),
the most common first: each costs the user's fit one more backward pass (a cost cap, not a choice
on any benchmark)."""

ALIGN_MAX_SEARCHED = 16
"""At most this many learnwares a coded task's classes are aligned with by their specs
(`searched_realignments`), the closest by the task's own spec first: each costs one forward pass
of the user's examples, and each alignment found one more backward pass (a cost cap, not a choice
on any benchmark)."""


AGREEMENT_WEIGHT = 1.0
"""Nats of shot score a unit of agreement is worth (`weighed_by_agreement`): a checked match's
mean κ with the other checked matches on their declared inputs is added to its score on the
user's examples. A few examples often cannot tell several learnwares of one family apart (eight
sentiment models scored on 16 reviews within a few hundredths of a nat), and a model trained on a
twentieth of the data, or on noisy labels, can win on them by luck; the agreement is evidence from
a few hundred inputs that the examples do not hold. The scale: κ runs from 0 (chance) to 1 (the
same answers) as a mean log-probability runs over about a nat between a sure model and a guess
among two labels (log 2 = 0.69). Chosen on an offline replay of market 2's 879 users with examples
(0.5 / 1 / 2: 0.9658 / 0.9673 / 0.9666 normalised against 0.9611), then held on market 0
(docs/benchmarks/identification.md, "The checked matches' agreement weighs in")."""


@dataclass(frozen=True)
class ShotScore:
    """How a learnware did on a user's labelled examples. Ordered by `log_likelihood`."""

    accuracy: float
    confidence: float
    """Mean probability it gave the true labels (restricted and renormalised to the user's labels);
    equals the accuracy for a model that gives no probabilities."""
    log_likelihood: float
    """Mean log-probability it gave the true labels, each at least `FLOOR_SHARE_OF_CHANCE` of
    chance (a model without probabilities gives 1 to its answer). The order of checked matches: a proper score, so a
    learnware that is right by luck on easy examples but unsure ranks below one that is sure;
    accuracy alone ties often on a handful of examples and rewards luck."""

    map_cost: float = 0.0
    """Nats per example of the label map, where the examples chose it (`map_cost`); 0 for a map by
    name or by meaning."""
    names_agree: bool | None = None
    """For a map the examples chose between meaningful names: whether the names read it as likelier
    than a map drawn at random (`names_map_nats` below the uniform price); None otherwise."""

    @property
    def score(self) -> float:
        """What orders checked matches: the mean log-probability less the map's cost."""
        return self.log_likelihood - self.map_cost

    @property
    def rank_key(self) -> tuple[float, float, float]:
        return (self.score, self.accuracy, self.confidence)


def _true_probabilities(
    user_pred: np.ndarray, user_probs: np.ndarray | None, labels: np.ndarray
) -> np.ndarray:
    if user_probs is None:
        return (user_pred == labels).astype(np.float64)
    return np.asarray(user_probs, dtype=np.float64)[np.arange(len(labels)), labels]


def _score(right: np.ndarray, true_probs: np.ndarray, n_labels: int) -> ShotScore:
    logs = np.log(np.clip(true_probs, FLOOR_SHARE_OF_CHANCE / max(1, n_labels), 1.0))
    return ShotScore(float(np.mean(right)), float(np.mean(true_probs)), float(np.mean(logs)))


def shot_score(
    predicted: np.ndarray, probs: np.ndarray | None, labels: np.ndarray, label_map: LabelMap
) -> ShotScore:
    """Score a model's predictions (its own class ids) on the user's examples under ``label_map``."""
    labels = np.asarray(labels, dtype=np.int64)
    if probs is not None and np.asarray(probs).shape != (len(labels), label_map.n_model_classes):
        raise ValueError(
            f"probabilities of shape {np.asarray(probs).shape} for {len(labels)} examples of "
            f"{label_map.n_model_classes} classes"
        )
    user_pred, user_probs = answers(predicted, probs, label_map)
    return _score(
        user_pred == labels, _true_probabilities(user_pred, user_probs, labels), len(label_map.model_class)
    )


def held_out_score(
    predicted: np.ndarray,
    probs: np.ndarray | None,
    labels: np.ndarray,
    label_map: LabelMap,
    log_prior: np.ndarray | None = None,
    order: Sequence[int] | None = None,
) -> ShotScore:
    """The score on the user's examples under ``label_map``, honest about how it was chosen.

    A map chosen by names is scored as it is. One chosen by the examples is optimistic on them
    (more so the more classes the model has to pick from: a six-class model restricted to two
    fits 16 sentiment examples by luck), so each example is scored under the map chosen on the
    others (leave-one-out), and the score carries the map's `map_cost` (under the names' reading
    ``log_prior`` where they have one: `names_log_prior`, or as exceptions to the numbering of
    the codes ``order`` the map was weighed against where that is shorter: `reading_nats`, plus
    what naming that numbering costs, `best_numbering`; each held-out example's map picks its
    own numbering); the map shown is the one chosen on all of
    them. The cost counts the labels with examples only, as `_reading_is_shorter` does: where the
    others go is not what the examples are told with, and they do not pay for it (64 examples of
    64 of 77 intents name their classes in log(77! / 13!) nats, 3.7 per example, not log 77!).

    Held out, a label's only example leaves nothing to place that label by, unless the names or
    the codes' reading do; then the example is scored under the map chosen on all of them, with
    itself: the two-part code's own term, its class paid for by the map's cost above. Each
    example scored at chance instead (its label put on any class the others leave free), every
    learnware tied at a guess for a user of 77 intents renumbered with one example of each of 64
    of them, and they kept the spec's order, a twin trained on 40% wrong labels first on three
    seeds of the full market. Told in two parts, a model that fits each example well under one
    injective map beats a guess (log 77 = 4.3 nats per example) by what it saves over the map's
    price, while one whose answers collide (examples of different labels on one class, which an
    injective map cannot all honour) pays for each collision with what it gives the class left.
    """
    if label_map.how != "examples":
        return shot_score(predicted, probs, labels, label_map)
    labels = np.asarray(labels, dtype=np.int64)
    predicted = np.asarray(predicted, dtype=np.int64)
    n_user, n_model = len(label_map.model_class), label_map.n_model_classes
    right, true_probs = [], []
    for i in range(len(labels)):
        keep = np.arange(len(labels)) != i
        held = map_by_examples(
            predicted[keep],
            None if probs is None else np.asarray(probs)[keep],
            labels[keep],
            n_user,
            n_model,
            log_prior if label_map.names_weighed else None,
            order if label_map.numbering is not None else None,
        )
        one = slice(i, i + 1)
        placed = held.names_weighed or held.numbers_hold or bool(np.any(labels[keep] == labels[i]))
        user_pred, user_probs = answers(
            predicted[one], None if probs is None else np.asarray(probs)[one], held if placed else label_map
        )
        right.append(float(user_pred[0] == labels[i]))
        true_probs.append(float(_true_probabilities(user_pred, user_probs, labels[one])[0]))
    scored = _score(np.asarray(right), np.asarray(true_probs), n_user)
    seen = np.unique(labels)
    names_nats = None if log_prior is None else names_map_nats(label_map, log_prior)
    paid = None if log_prior is None else names_map_nats(label_map, log_prior, seen)
    if label_map.numbering is not None:
        kept = np.asarray(label_map.model_class, dtype=np.int64)[seen]
        numbering = label_map.numbering
        paid = reading_nats(kept, np.asarray(numbering.order, dtype=np.int64)[seen], n_model) + numbering.nats
    return replace(
        scored,
        map_cost=map_cost(len(seen), n_model, len(labels), paid),
        names_agree=None if names_nats is None else names_nats < map_cost(n_user, n_model, 1),
    )


def check_on_examples(
    user_names: Sequence[str],
    model_names: Sequence[str],
    predicted: np.ndarray,
    probs: np.ndarray | None,
    labels: np.ndarray,
    *,
    similarity: np.ndarray | None,
    temperature: float,
) -> tuple[LabelMap, ShotScore] | None:
    """One learnware of the shot check: its label map (`choose_label_map`) and its score on the
    user's examples (`held_out_score`, a map the examples chose priced by the names' reading of
    it where their ``similarity`` was read, with the space's head ``temperature``); None when no
    map applies."""
    prior = None if similarity is None else names_log_prior(user_names, model_names, similarity, temperature)
    order = code_order(user_names, model_names)
    label_map = choose_label_map(
        user_names,
        model_names,
        similarity=similarity,
        predicted=predicted,
        probs=probs,
        labels=labels,
        log_prior=prior,
        order=order,
    )
    if label_map is None:
        return None
    return label_map, held_out_score(predicted, probs, labels, label_map, prior, order)


def check_predicted(
    user_names: Sequence[str],
    model_names: Sequence[str],
    predicted: np.ndarray,
    probs: np.ndarray | None,
    labels: np.ndarray,
    *,
    name_similarity: Callable[[Sequence[str], Sequence[str]], np.ndarray],
    temperature: float,
) -> tuple[LabelMap, ShotScore] | None:
    """`check_on_examples`, with the names' ``name_similarity`` (the space's) read only where a
    map is to be chosen (`Tier.LABEL_MAP`): what the worker, a client checking on the user's own
    machine and the benchmark all run for each checked learnware."""
    similarity = (
        name_similarity(user_names, model_names)
        if tier_of(user_names, model_names) == Tier.LABEL_MAP
        else None
    )
    return check_on_examples(
        user_names, model_names, predicted, probs, labels, similarity=similarity, temperature=temperature
    )


def check_count(ordered: Sequence[Candidate], user_names: Sequence[str], k: int, k_unnamed: int) -> int:
    """How many candidates the shot check runs: ``k`` when one of them answers the user's labels
    by name, ``k_unnamed`` when none does (see `SHOT_CHECK_K_UNNAMED`); 0 when ``k`` is 0."""
    if k <= 0:
        return 0
    named = any(tier_of(user_names, c.label_names) == Tier.BY_NAME for c in ordered)
    return k if named else max(k, k_unnamed)


@dataclass(frozen=True)
class Candidate:
    """A learnware the index found: its id, spec cosine and label names."""

    id: int
    score: float
    label_names: tuple[str, ...]
    aligned: bool = False
    """Its score compares it with the task's spec refitted under its own label names (`realignments`)."""
    reading: bool = False
    """For a realigned score: the names were a reading of the task's numbered codes
    (`Realignment.reading`): it counts only where it stands above every own score (`with_alignment`)."""
    searched: bool = False
    """That reading was the alignment its own spec agrees with most (`searched_realignments`)."""


@dataclass(frozen=True)
class Realignment:
    """Names a task's spec is refitted under before it is compared with one label set's learnwares."""

    label_set: frozenset[str]
    """The learnwares it scores: those with this label set (`label_set`)."""
    names: tuple[str, ...]
    """The user's label i named ``names[i]``: the learnwares' own names, as the map goes."""
    both_ways: bool
    """Two labels the names' meaning does not map: either alignment may hold, and as the other is
    the refitted spec negated, the score is the cosine's absolute value (`aligned_score`)."""
    reading: bool = False
    """The names as the task's numbered codes read them (`code_order`: its "3" named as the
    learnwares' class 3), a guess no meaning backs: it counts only where it lifts a learnware
    above every candidate's own score (`with_alignment`)."""
    learnwares: frozenset[int] | None = None
    """Where set, the alignment was searched for these learnwares (`searched_realignments`) and
    scores only them; otherwise it scores every learnware of ``label_set``."""
    search_only: bool = False
    """No reading backs any one alignment (names whose meaning maps nothing): ``names``
    are the learnwares' own order, a placeholder for the search (`with_searched`) to replace.
    Past the search's cost cap it is dropped, not refitted."""


def realignments(
    user_names: Sequence[str],
    label_sets: Sequence[tuple[Sequence[str], int]],
    similarity: Callable[[Sequence[str], Sequence[str]], np.ndarray] | None = None,
    limit: int = ALIGN_MAX_LABEL_SETS,
) -> list[Realignment]:
    """Under which names a task's spec is refitted (`pave.fit_realigned_specs`) before it is
    compared with the learnwares of each label set of ``label_sets`` (the learnwares' label
    names, each with how many learnwares have them), when none of them answers the task's labels
    by name: for a label set the names' meaning maps the task's labels onto (`map_by_meaning`,
    given their ``similarity``), under the names of that map; for a two-class set it does not
    map, under its own names both ways round; for a set of as many classes that the task's
    numbered codes read (`code_order`: "3" is its class 3), under its names in that order, as a
    reading (`Realignment.reading`); for any other set of as many classes (more than two), a
    placeholder only the search replaces (`Realignment.search_only`, `with_searched`); none for the
    rest. The most common label sets first, at most ``limit`` (of the ``4 * limit`` most common read).

    Why: the spec is fitted under the user's names, and the label-name head is most of what
    separates learnwares with as many classes (issue 15: the same examples under a spam filter's
    own names score 0.37 against it, −0.08 under other names). Refitted under a learnware's
    names, the task is compared with it as a user who names the classes as it does would be.
    Codes ("0", "1") map nothing by meaning, and more than two labels have too many alignments to
    refit each: their numbers' reading is one guess, and the alignment each learnware's own spec
    agrees with most another (`with_searched`). Names whose meaning maps nothing clearly (another
    language, rare words) are in the same place, with no reading to fall back on (letter codes
    have one: they read as numbers do, "A" as class 0). Neither is a fact, which is why both
    count only where they stand out (`with_alignment`)."""
    if any(tier_of(user_names, names) == Tier.BY_NAME for names, _ in label_sets):
        return []
    counts: dict[frozenset[str], int] = {}
    first: dict[frozenset[str], tuple[str, ...]] = {}
    for names, count in label_sets:
        if tier_of(user_names, names) != Tier.LABEL_MAP:
            continue
        key = label_set(names)
        counts[key] = counts.get(key, 0) + count
        first.setdefault(key, tuple(names))
    codes = labels_are_codes(user_names)
    out: list[Realignment] = []
    # The names' meaning is read for the most common sets only (an embedding per new label set):
    # a market of many rare label sets costs no more than one of a few common ones.
    for key in sorted(counts, key=lambda key: (-counts[key], sorted(key)))[: 4 * limit]:
        names = first[key]
        by_meaning = (
            None
            if similarity is None or codes or labels_are_codes(names)
            else map_by_meaning(user_names, names, similarity(user_names, names))
        )
        same_size = len(names) == len(user_names)
        order = code_order(user_names, names) if same_size else None
        if by_meaning is not None:
            out.append(Realignment(key, tuple(names[j] for j in by_meaning.model_class), False))
        elif same_size and len(names) == 2:
            out.append(Realignment(key, names, True))
        elif order is not None:
            out.append(Realignment(key, tuple(names[j] for j in order), False, reading=True))
        elif same_size:
            out.append(Realignment(key, names, False, reading=True, search_only=True))
        if len(out) == limit:
            break
    return out


def best_alignment(gain: np.ndarray) -> tuple[int, ...]:
    """The learnware's class for each of the task's classes that maximises the total ``gain``
    (`pave.alignment_gains`; rows the task's classes, columns the learnware's), one class each."""
    gain = np.asarray(gain, dtype=np.float64)
    if gain.ndim != 2 or gain.shape[0] > gain.shape[1]:
        raise ValueError(
            f"gains of shape {gain.shape}: need a row per task class, at most as many as columns"
        )
    rows, cols = linear_sum_assignment(-gain)
    out = np.empty(gain.shape[0], dtype=np.int64)
    out[rows] = cols
    return tuple(int(c) for c in out)


def searched_realignments(
    reading: Realignment, members: Sequence[tuple[int, Sequence[str]]], gains: Sequence[np.ndarray]
) -> list[Realignment]:
    """A task's classes (codes, or names that map nothing by meaning) aligned with each learnware
    of ``reading``'s label set by the learnware's own spec: ``members`` are (id, label names), ``gains`` their `pave.alignment_gains`.
    The learnwares whose best alignment (`best_alignment`) names the task's classes alike share one
    refit. The numbers' reading (`code_order`) is one alignment of many; the user's codes may
    follow another numbering, and then the reading compares the task with the learnware under
    the wrong names, which is noise. A guess all the same (the best of many alignments fits any
    spec a little), so it counts only where it stands out, as the reading did (`with_alignment`)."""
    groups: dict[tuple[str, ...], set[int]] = {}
    for (lw_id, names), gain in zip(members, gains, strict=True):
        if label_set(names) != reading.label_set:
            raise ValueError(f"learnware {lw_id}'s labels are not the label set of the reading")
        key = tuple(names[j] for j in best_alignment(gain))
        groups.setdefault(key, set()).add(lw_id)
    return [
        Realignment(reading.label_set, names, False, reading=True, learnwares=frozenset(ids))
        for names, ids in groups.items()
    ]


def with_searched(
    plan: Sequence[Realignment],
    members_of: Callable[[Realignment], Sequence[tuple[int, np.ndarray, Sequence[str]]]],
    gains_of: Callable[[Sequence[tuple[np.ndarray, Sequence[str]]]], Sequence[np.ndarray]],
    limit: int = ALIGN_MAX_SEARCHED,
) -> list[Realignment]:
    """``plan`` (`realignments`) with each reading of numbered codes, and each placeholder for a
    search (`Realignment.search_only`), replaced by the alignments its learnwares' own specs agree
    with most (`searched_realignments`): ``members_of`` gives a reading's learnwares (id, spec
    vector, label names), the closest to the task's own spec first; ``gains_of`` their
    `pave.alignment_gains`. At most ``limit`` learnwares in all; past that a reading stays as it
    was and a placeholder is dropped."""
    out = [r for r in plan if not r.reading]
    left = limit
    for realignment in (r for r in plan if r.reading):
        members = list(members_of(realignment))[:left] if left > 0 else []
        if not members:
            if not realignment.search_only:
                out.append(realignment)
            continue
        left -= len(members)
        gains = gains_of([(vector, names) for _, vector, names in members])
        out += searched_realignments(realignment, [(i, names) for i, _, names in members], gains)
    return out


def aligned_score(realignment: Realignment, cosine: float) -> float:
    """A learnware's score under ``realignment``, from its cosine with the refitted spec."""
    return abs(float(cosine)) if realignment.both_ways else float(cosine)


def with_alignment(candidates: Sequence[Candidate], realigned: Sequence[Candidate]) -> list[Candidate]:
    """``candidates`` with the learnwares of the realigned label sets scored as ``realigned``
    scores them (`aligned_score` of their cosine with the task's spec refitted under their
    `Realignment`), marked `Candidate.aligned`. Learnwares found only by a realigned search are
    added; a candidate the realigned searches did not return keeps its own score.

    A reading of numbered codes (`Candidate.reading`) counts only where it lifts a learnware above
    every candidate's own score. A right reading mostly does (its cosine was 0.07–0.57 for all but
    one of the benchmark's coded users it served, their own cosines near 0); a wrong one is one
    more draw of noise, and the higher of two draws lifted other tasks' learnwares into the shot
    check in place of the user's own (codes numbered otherwise than the task,
    docs/benchmarks/identification.md).
    Unsorted: the caller orders them (`by_tier`)."""
    out = {c.id: c for c in candidates}
    top_own = max((c.score for c in candidates), default=-math.inf)
    for cand in realigned:
        if cand.reading and cand.score <= top_own:
            continue
        out[cand.id] = replace(cand, aligned=True)
    return list(out.values())


def by_tier(candidates: Sequence[Candidate], user_names: Sequence[str]) -> list[Candidate]:
    """Tiers in order (what a learnware can answer), each in cosine order; equal cosines (copies
    of one spec) oldest first, so a copy never jumps its original."""
    return sorted(candidates, key=lambda c: (tier_of(user_names, c.label_names), -round(c.score, 6), c.id))


def _unit(vector: np.ndarray) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)


def originals_first(
    ordered: Sequence[Candidate],
    user_names: Sequence[str],
    vectors: Mapping[int, np.ndarray],
    duplicate_cosine: float = DUPLICATE_COSINE,
) -> list[Candidate]:
    """Near-identical specs of one tier (copies of one spec) rank as one group at the place of its
    best member, oldest (lowest id) first: a copy of a good learnware's spec never jumps the
    original, whose cosine may be a hair lower. Candidates without a vector stay where they are."""
    groups: list[tuple[Tier, np.ndarray | None, list[Candidate]]] = []
    for cand in ordered:
        tier = tier_of(user_names, cand.label_names)
        vector = vectors.get(cand.id)
        unit = None if vector is None else _unit(vector)
        home = None
        if unit is not None:
            home = next(
                (
                    members
                    for t, u, members in groups
                    if t == tier and u is not None and float(u @ unit) >= duplicate_cosine
                ),
                None,
            )
        if home is None:
            groups.append((tier, unit, [cand]))
        else:
            home.append(cand)
    return [cand for _, _, members in groups for cand in sorted(members, key=lambda c: c.id)]


def near_copies(
    ids: Sequence[int], vectors: Mapping[int, np.ndarray], duplicate_cosine: float = DUPLICATE_COSINE
) -> dict[int, int]:
    """Of ``ids`` in rank order, those whose spec is at least ``duplicate_cosine`` close to an
    earlier one's, each with the first such earlier id (its group's head): copies, floods. An id
    without a vector is nobody's copy."""
    held = [i for i in ids if i in vectors]
    if len(held) < 2:
        return {}
    units = np.stack([_unit(vectors[i]) for i in held])
    close = (units @ units.T) >= duplicate_cosine  # one product for every pair (top_k ≤ 100)
    heads: list[int] = []  # positions in ``held``
    copies: dict[int, int] = {}
    for position, i in enumerate(held):
        head = next((h for h in heads if close[h, position]), None)
        if head is None:
            heads.append(position)
        else:
            copies[i] = held[head]
    return copies


def choose_checked(
    ordered: Sequence[Candidate],
    user_names: Sequence[str],
    vectors: Mapping[int, np.ndarray],
    k: int = SHOT_CHECK_K,
    *,
    copies: Mapping[int, int] | None = None,
    duplicate_cosine: float = DUPLICATE_COSINE,
    per_cluster: int = PER_CLUSTER,
) -> list[int]:
    """The candidates the shot check runs: the first ``k`` of ``ordered`` that can answer, at most
    ``per_cluster`` of each group of near-identical specs (`near_copies` of ``vectors`` by id, or
    the groups given as ``copies``, id → its group's head, where the specs are not at hand: a
    client checking a spec-only task's matches). So k copies of one spec cannot fill the check."""
    answering = [c.id for c in ordered if tier_of(user_names, c.label_names) != Tier.CANNOT]
    heads = near_copies(answering, vectors, duplicate_cosine) if copies is None else copies
    chosen: list[int] = []
    taken: dict[int, int] = {}
    for i in answering:
        if len(chosen) >= k:
            break
        head = heads.get(i, i)
        if taken.get(head, 0) >= per_cluster:
            continue
        taken[head] = taken.get(head, 0) + 1
        chosen.append(i)
    return chosen


@dataclass(frozen=True)
class Ranked:
    """One match as the dock shows it: where it stands and why."""

    id: int
    score: float
    tier: Tier
    label_map: LabelMap | None
    shot: ShotScore | None
    """Its score on the user's examples, where the shot check ran it."""
    chance: float
    """Accuracy of guessing among the user's labels (1 / their count). A uniform guess scores
    log(chance) by the shot score; a checked match whose score is no better is demoted."""
    aligned: bool = False
    """Its score compares it with the task's spec refitted under its own label names
    (`Candidate.aligned`)."""
    reading: bool = False
    """Those names in the order the task's numbered codes read (`Candidate.reading`)."""
    searched: bool = False
    """That order the one its spec agrees with most (`Candidate.searched`)."""
    agreement: float | None = None
    """Its mean κ with the other close matches on their pooled declared inputs (`app.ml.agreement`):
    where the dock had no examples to check on (a spec-only task), it orders those matches; for a
    checked match, it is added to the shot score (`weighed_by_agreement`)."""
    weighed: bool = False
    """Checked, and ordered by its shot score plus `AGREEMENT_WEIGHT` × its ``agreement``
    (`weighed_by_agreement`)."""

    @property
    def weighed_score(self) -> float | None:
        """What orders it among the checked matches whose agreement weighs in: its shot score plus
        `AGREEMENT_WEIGHT` × its κ; None where the agreement did not weigh in."""
        if not self.weighed or self.shot is None or self.agreement is None:
            return None
        return self.shot.score + AGREEMENT_WEIGHT * self.agreement

    @property
    def checked(self) -> bool:
        return self.shot is not None

    @property
    def beats_chance(self) -> bool:
        """Whether its shot score beats a uniform guess among the user's labels (log 1 / their
        count): judged by the score the first group is ordered by, so a match whose map or
        confident mistakes cost more than a guess would is not ranked above unchecked ones
        (an emotion model mapped onto four news topics, 28% right on 32 examples but scoring
        −1.70 against a guess's −1.39, once did)."""
        return self.shot is not None and self.shot.score > math.log(self.chance) + 1e-9

    def fields(
        self, user_names: Sequence[str], model_names: Sequence[str], n_examples: int = 0
    ) -> dict[str, object]:
        """What the API shows of this match's place (`MatchRead`'s fields that the ranking sets,
        not the learnware's own): shared by the worker and a client that checks matches on the
        user's own machine (`app.client.DockClient.check_here`)."""
        label_map, shot = self.label_map, self.shot
        return {
            "score": round(float(self.score), 6),
            "aligned": self.aligned,
            "tier": self.tier.slug if user_names else None,
            "label_map": None if label_map is None else label_map.names(user_names, model_names),
            "label_map_how": None if label_map is None else label_map.how,
            "restricted": bool(label_map is not None and label_map.restricted),
            "checked": self.checked,
            "shot_accuracy": None if shot is None else shot.accuracy,
            "shot_confidence": None if shot is None else shot.confidence,
            "shot_log_likelihood": None if shot is None else shot.log_likelihood,
            "shot_map_cost": None if shot is None else shot.map_cost,
            "agreement": None if self.agreement is None else round(float(self.agreement), 6),
            "agreement_weighed": self.weighed,
            "reason": self.reason(n_examples, user_names, model_names)
            if user_names
            else f"spec similarity {self.score:.3f}",
        }

    def reason(
        self, n_examples: int = 0, user_names: Sequence[str] = (), model_names: Sequence[str] = ()
    ) -> str:
        """One line a user can read: why this match is where it is (with both label sets, a map
        not by name is spelt out: `LabelMap.describe`)."""
        parts = []
        if self.shot is not None:
            guess = math.log(self.chance)
            verdict = (
                ""
                if self.beats_chance
                else f" (no better than chance, a uniform guess's {guess:.2f}: ranked after unchecked matches "
                "that answer your labels by name, then by spec similarity)"
            )
            shots = f"your {n_examples} examples" if n_examples else "your examples"
            cost = (
                f" less {self.shot.map_cost:.2f} for the label map your examples chose"
                if self.shot.map_cost > 0
                else ""
            )
            parts.append(
                f"checked on {shots}: {self.shot.accuracy:.0%} right, mean log-probability of "
                f"your labels {self.shot.log_likelihood:.2f}{cost}{verdict}"
            )
            if (weighed := self.weighed_score) is not None and self.agreement is not None:
                parts.append(
                    f"agrees with the other checked matches on their declared inputs by κ "
                    f"{self.agreement:.2f}, which is added to its score: {self.shot.score:.2f} + "
                    f"{AGREEMENT_WEIGHT * self.agreement:.2f} = {weighed:.2f} orders the checked matches"
                )
        elif self.agreement is not None:
            parts.append(
                f"agrees with the other close matches on their declared inputs by κ {self.agreement:.2f} "
                "(no examples of yours to check on: of the close matches, those the others bear out most come first)"
            )
        if self.tier == Tier.CANNOT:
            parts.append("cannot answer: it has fewer classes than your task has labels")
        elif self.label_map is not None:
            agree = None if self.shot is None else self.shot.names_agree
            parts.append(self.label_map.describe(user_names, model_names, agree))
        elif self.tier == Tier.LABEL_MAP:
            parts.append(
                "other label names, no label map chosen: may answer through one (not checked), "
                "ranked after the checked matches"
            )
        parts.append(
            f"spec similarity {self.score:.3f}"
            + (
                (
                    " (your task's spec refitted under its label names"
                    + (
                        f", your {'codes' if labels_are_codes(user_names) else 'labels'} aligned with its "
                        "classes as its spec agrees most"
                        if self.searched
                        else ", your codes read as its class numbers"
                        if self.reading
                        else ""
                    )
                    + ")"
                )
                if self.aligned
                else ""
            )
        )
        return "; ".join(parts)


def rank_for_task(
    ordered: Sequence[Candidate],
    user_names: Sequence[str],
    *,
    maps: Mapping[int, LabelMap | None] | None = None,
    shots: Mapping[int, ShotScore | None] | None = None,
    agreement: Mapping[int, float] | None = None,
) -> list[Ranked]:
    """The final order (module docstring): checked and better than chance by shot score (those
    with an ``agreement`` score, the first five, by the score plus it: `weighed_by_agreement`); the
    unchecked that answer the user's labels with a map (by name), those with an ``agreement``
    score first by it (`app.ml.agreement`: a spec-only task's close matches), then in
    ``ordered``'s order (it must be `by_tier`'s); checked but no better than chance, in
    ``ordered``'s order; the unchecked that would need a label map nobody chose, in ``ordered``'s
    order; those that cannot answer. Stable: equal scores keep ``ordered``'s order."""
    maps = maps or {}
    shots = shots or {}
    agreement = agreement or {}
    chance = 1.0 / max(1, len(user_names))
    ranked = []
    for cand in ordered:
        tier = tier_of(user_names, cand.label_names)
        label_map = maps.get(cand.id)
        if label_map is None and tier == Tier.BY_NAME:
            label_map = map_by_name(user_names, cand.label_names)
        ranked.append(
            Ranked(
                cand.id,
                cand.score,
                tier,
                label_map,
                shots.get(cand.id),
                chance,
                cand.aligned,
                cand.reading,
                cand.searched,
                agreement.get(cand.id),
            )
        )

    def group(r: Ranked) -> int:
        if r.tier == Tier.CANNOT:
            return 4
        if r.checked:
            return 0 if r.beats_chance else 2
        # Unchecked: usable as it stands where it has a map; without one the user cannot read its
        # answers at all, so it comes after what was run on the examples, even what did badly (a
        # cola user's own learnware, 64% right but no better than a guess by its confident
        # mistakes, once ranked below an unchecked intent model with no map).
        return 1 if r.label_map is not None else 3

    def by_shot_score(g: int) -> list[Ranked]:
        # sorted() is stable under reverse=True too: equal shot scores keep the incoming order.
        return sorted(
            (r for r in ranked if group(r) == g),
            key=lambda r: r.shot.rank_key if r.shot else (-np.inf, 0.0, 0.0),
            reverse=True,
        )

    # The checked ones no better than chance keep the spec's order. Their scores are no evidence:
    # where no map the examples can pay for fits them, every score is a guess's or worse, and the
    # least bad is the model that commits to nothing (a twin trained on random labels,
    # near-uniform, scores a guess's exactly, while a good one, sure of classes the map cannot yet
    # name, scores below). Ordered by that score, the random twin came first for every user of 77
    # intents renumbered, one example a code, of the identification benchmark, when each such
    # example was scored at chance (docs/benchmarks/identification.md, "Checks no better than
    # chance"; now told in two parts: `held_out_score`).
    def in_order(g: int) -> list[Ranked]:
        return [r for r in ranked if group(r) == g]

    # A spec-only task's close matches the others bear out most first (`app.ml.agreement`): the
    # cosine barely tells a good model of a task from one trained on a twentieth of its data.
    unchecked = in_order(1)
    agreed = sorted(
        (r for r in unchecked if r.agreement is not None), key=lambda r: -float(r.agreement or 0.0)
    )
    rest = [r for r in unchecked if r.agreement is None]
    return weighed_by_agreement(by_shot_score(0)) + agreed + rest + in_order(2) + in_order(3) + in_order(4)


def weighed_by_agreement(checked: list[Ranked]) -> list[Ranked]:
    """The checked matches better than chance, best score first (``checked``), with those up to the
    last that has an ``agreement`` (the first five, `app.ml.agreement.checked_peers`) ordered by
    their shot score plus `AGREEMENT_WEIGHT` × their κ and marked `Ranked.weighed` (one the
    agreement check could not run counts at the others' mean κ, and is not marked); the rest
    follow in score order. Unchanged where none has an agreement score.

    Why: a few examples often cannot separate several learnwares of one family, and a model
    trained on a twentieth of the data, or on noisy labels, can win on them by luck; how much
    the checked models bear one another out on a few hundred of their own inputs is evidence the
    examples do not hold (`app.ml.agreement`). Added to the score rather than breaking ties only:
    ordering the matches the examples could not tell apart (within one standard error) by κ alone
    let agreement overrule the examples' evidence of the user's domain, and was a wash on two
    markets (docs/benchmarks/identification.md)."""
    last = max((i for i, r in enumerate(checked) if r.agreement is not None), default=-1)
    if last < 0:
        return checked
    head = checked[: last + 1]
    kappas = [float(r.agreement) for r in head if r.agreement is not None]
    neutral = float(np.mean(kappas))

    def weighed(r: Ranked) -> float:
        assert r.shot is not None
        return r.shot.score + AGREEMENT_WEIGHT * (neutral if r.agreement is None else float(r.agreement))

    # sorted() is stable: equal sums keep the score order.
    ordered = sorted(head, key=weighed, reverse=True)
    return [replace(r, weighed=r.agreement is not None) for r in ordered] + checked[last + 1 :]


def as_ranked(candidates: Sequence[Candidate]) -> list[Ranked]:
    """Candidates in their given (cosine) order, for a spec ranked without the task's labels."""
    return [Ranked(c.id, c.score, Tier.LABEL_MAP, None, None, 0.0) for c in candidates]
