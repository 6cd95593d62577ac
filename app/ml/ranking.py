"""How the dock orders the learnwares it finds for a user's task, and why each is where it is.

The spec's cosine says which learnwares do the user's *kind* of task. Three more facts decide
whether a learnware can serve the user and how well:

1. **What it can answer** (its tier). A learnware answers the user's labels *by name* when every
   one of them is among its own (equal sets, or a superset whose answers are restricted to the
   user's labels); it *may answer through a label map* when it has at least as many classes
   under other names; it *cannot answer* with fewer classes than the user has labels.
2. **Which label map** turns its answers into the user's labels. By name where the names match;
   by meaning where both sides' names carry meaning and their embeddings agree on one map by a
   clear margin per label moved ("good" is "positive"), though a few of a larger model's classes
   are the examples' to pick where there are some (`choose_label_map`); by the user's examples
   where the names are codes ("0", "LABEL_1") or do not decide it, weighed with the names'
   reading where they carry meaning, so clear names settle what a few examples cannot, and
   with the user's numbered codes read as the model's class numbers ("3" is its class 3, the
   order a dataset's class ids keep: `code_order`) where the examples bear that reading out
   (`map_by_examples`). A map chosen from data alone can be absurd (an inverted spam filter's
   "ham" onto the user's word for spam), which is why meaning comes first, and why a map the
   examples chose pays for itself (`map_cost`): its description length, under the names' own
   reading of the map where both sides' names carry meaning.
3. **How it does on the user's examples** (the shot check): while the dock holds a few-shot
   task's examples it runs a few of the top candidates on them under their label maps. The
   candidates are picked so that near-identical specs (copies, floods) take one place, not all.

The order, as the API documents it: checked matches that did better than chance (a score above a
uniform guess's, log 1 / the user's label count), by the mean
log-probability they gave the user's labels (a proper score: a model that is right by luck on a
handful of easy examples, but unsure, loses to one that is right and sure) less the cost of a
label map the examples chose (`map_cost`: the map's description length per example, so a
larger model restricted to a few of its classes, one of many maps that could fit a handful of
examples, does not win on a lucky fit, and a map the names argue against costs the most); then
the unchecked ones that answer the user's labels by name, in cosine order; then checked matches
that did no better than chance, in cosine order (a check no better than a guess is no evidence
either way, so the spec decides among them: `rank_for_task`); then the unchecked ones that would
need a label map (none was chosen: the user could not read their answers), in cosine order; then
those that cannot answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Literal

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import logsumexp

SHOT_CHECK_K = 5
"""How many candidates the shot check runs on the user's examples when some learnware answers the
user's labels by name."""

SHOT_CHECK_K_UNNAMED = 20
"""How many it runs when none does (codes, another language, unusual names): the spec, fitted
under the user's names, then says less about which learnware fits, so the check looks wider.
On the quick identification benchmark 5 / 12 / 20 gave a mean normalised accuracy of
0.965 / 0.977 / 0.982 (`docs/benchmarks/identification.md`); chosen there."""

FLOOR_SHARE_OF_CHANCE = 0.5
"""The least probability a shot counts with, as a share of chance (1 / the user's label count):
a confident mistake costs log(0.25) on two labels, not −∞. Unbounded, a few confident mistakes
of a good model (a spam filter right 14 of 16 times, and sure) lost to a model that hedges on
everything (a sentiment model mapped onto ham / spam, near 0.5 each time). On the quick
identification benchmark a floor of 0.001 / 0.2 / 0.3 / 0.4 / 0.5 / 0.6 of chance gave a mean
normalised accuracy of 0.976 / 0.976 / 0.981 / 0.979 / 0.982 / 0.981 and, for users with no
learnware of their own, 0.902 / 0.902 / 0.953 / 0.953 / 0.967 / 0.967; chosen there."""

DUPLICATE_COSINE = 0.95
"""Specs at least this close are one candidate for the shot check (copies, floods). Distinct
learnwares of one task score well below it (same task ≈ 0.1–0.6 on the benchmark)."""

PER_CLUSTER = 1
"""How many learnwares of one cluster of near-identical specs the shot check runs (the oldest)."""

NAME_MARGIN = 0.07
"""A label map by meaning needs its name similarity to beat every other map by this much per
label that the other map moves; below it the user's examples decide. On the shared datasets' 25
label sets renamed by synonyms and by French, whole and in three random halves each (98 maps),
the 23 wrong maps the base's embeddings gave all had margins of 0.066 or less; 0.07 keeps 46 of
the 75 right ones (`pavedock bench label-maps`, docs/benchmarks/label-maps.md). The margin was once taken per user
label instead, which shrinks with the label count: a 77-intent renaming whose every label is
clear scored 0.002 and went to the examples (12% right on 64 shots), and a renamed half of a
many-class model could not be served at all. Chosen on those label sets: a held-back renaming
may do otherwise."""

ALIGN_MAX_LABEL_SETS = 16
"""At most this many label sets a task's spec is refitted under (`realignments`),
the most common first: each costs the user's fit one more backward pass (a cost cap, not a choice
on any benchmark)."""

ALIGN_MAX_SEARCHED = 16
"""At most this many learnwares a coded task's classes are aligned with by their specs
(`searched_realignments`), the closest by the task's own spec first: each costs one forward pass
of the user's examples, and each alignment found one more backward pass (a cost cap, not a choice
on any benchmark)."""

MAP_PAIRS_SHOWN = 6
"""How many of a label map's pairs a match's reason spells out (the full map is in `label_map`)."""

_CODE = re.compile(r"^(?:label|class|cls|category|cat|c|l|y|id)?[\s_\-#:]*\d+$|^[a-z]$", re.IGNORECASE)

_TRAILING_NUMBER = re.compile(r"\d+$")

MapHow = Literal["names", "meaning", "examples"]

HELD_OUT = (
    "its accuracy there scores each example under the map chosen on the others, a label's only "
    "example under the map chosen on all of them, which the map's price pays for"
)
"""How a match's accuracy on the examples was scored where they chose its map (`held_out_score`)."""


def normalise_label(name: str) -> str:
    """Case, surrounding space, underscores and hyphens do not make another label."""
    return " ".join(re.sub(r"[_\-]+", " ", str(name)).split()).casefold()


def labels_are_codes(names: Sequence[str]) -> bool:
    """Names that carry no meaning: numbers, ``LABEL_3``, ``class 2``, single letters."""
    return all(_CODE.match(normalise_label(n)) for n in names)


def _code_numbers(names: Sequence[str]) -> list[int] | None:
    """The numbers of numbered codes ("3", "LABEL_3", "class 3"), distinct; None otherwise."""
    if not labels_are_codes(names):
        return None
    numbers = []
    for name in names:
        found = _TRAILING_NUMBER.search(normalise_label(name))
        if found is None:  # a letter code
            return None
        numbers.append(int(found.group()))
    return numbers if len(set(numbers)) == len(numbers) else None


def code_order(user_names: Sequence[str], model_names: Sequence[str]) -> tuple[int, ...] | None:
    """The map a user's numbered codes read: code k is the model's class k. None where they read
    none (names, letters, numbers out of the model's range).

    Numbered labels are most often a dataset's class ids, positions in its list of classes, the
    order a model trained on that dataset keeps (a Hugging Face model's ``id2label``). So the
    user's "k" reads as the model's class numbered k where its own labels are numbered codes too
    ("LABEL_k"), else as the k-th of its classes, counted from 0, or from 1 where the codes run up
    to the model's class count. A reading, not a fact: each label the examples place elsewhere
    pays for leaving it (`map_by_examples`), and where most leave it, the reading is dropped."""
    numbers = _code_numbers(user_names)
    if numbers is None:
        return None
    model_numbers = _code_numbers(model_names)
    if model_numbers is not None:
        position = {k: j for j, k in enumerate(model_numbers)}
        return tuple(position[k] for k in numbers) if all(k in position for k in numbers) else None
    n_model = len(model_names)
    if max(numbers) < n_model:
        return tuple(numbers)
    if min(numbers) >= 1 and max(numbers) <= n_model:
        return tuple(k - 1 for k in numbers)
    return None


def reading_nats(model_class: Sequence[int], order: Sequence[int], n_model: int) -> float:
    """A map's description length told as exceptions to the codes' reading ``order``
    (`code_order`): how many labels leave it (log(n + 1)), which (log of n choose k), and where
    each goes (log(n_model − 1)). A map that keeps the reading costs log(n + 1), against the
    uniform price of log(n_model! / (n_model − n)!) (`map_cost`): 5 nats against 605 for 150
    intents."""
    n = len(order)
    k = sum(1 for m, r in zip(model_class, order, strict=True) if int(m) != int(r))
    choose = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return math.log(n + 1) + choose + k * math.log(max(1, n_model - 1))


def _uniform_nats(n_user: int, n_model: int) -> float:
    """log of the number of injective maps of ``n_user`` labels into ``n_model`` classes."""
    return float(math.lgamma(n_model + 1) - math.lgamma(n_model - n_user + 1))


class Tier(IntEnum):
    """What a learnware can answer of a user's labels (lower is better)."""

    BY_NAME = 0
    """Every user label is among its labels (it may have more: its answers are restricted)."""
    LABEL_MAP = 1
    """At least as many classes under other names: it may answer through a label map."""
    CANNOT = 2
    """Fewer classes than the user has labels: it cannot answer the task."""

    @property
    def slug(self) -> str:
        return {0: "labels-by-name", 1: "label-map", 2: "cannot-answer"}[int(self)]


def label_set(names: Sequence[str]) -> frozenset[str]:
    """A label set as `tier_of` compares two: order, case and separators aside."""
    return frozenset(normalise_label(n) for n in names)


def tier_of(user_names: Sequence[str], model_names: Sequence[str]) -> Tier:
    model = label_set(model_names)
    user = label_set(user_names)
    if user <= model:
        return Tier.BY_NAME
    return Tier.LABEL_MAP if len(model) >= len(user) else Tier.CANNOT


@dataclass(frozen=True)
class LabelMap:
    """For each of the user's labels (by id), the model's class that answers it."""

    model_class: tuple[int, ...]
    how: MapHow
    n_model_classes: int
    names_weighed: bool = False
    """For a map the examples chose: whether the names' reading of it weighed in with them
    (`map_by_examples` given the names' reading)."""
    numbers_follow: int | None = None
    """For a map the examples chose against the user's numbered codes read as the model's class
    numbers (`code_order`): how many of the user's labels it keeps where the numbers put them;
    None where the codes read no map."""
    numbers_hold: bool = False
    """Whether the examples bear that reading out (the map kept near the numbers is the shorter
    code of the examples than their own best map: `map_by_examples`); otherwise it only places
    labels without examples where nothing else wants their classes."""

    @property
    def restricted(self) -> bool:
        """The model has classes the user does not: its answers are restricted to the mapped ones."""
        return self.n_model_classes > len(self.model_class)

    def names(self, user_names: Sequence[str], model_names: Sequence[str]) -> dict[str, str]:
        """The map as the user reads it: the model's label → the user's label."""
        return {model_names[m]: user_names[u] for u, m in enumerate(self.model_class)}

    def describe(
        self, user_names: Sequence[str] = (), model_names: Sequence[str] = (), names_agree: bool | None = None
    ) -> str:
        """How the map was chosen; given both label sets, a map that is not by name is spelt out,
        and one the examples chose between meaningful names carries a warning: the names' meaning
        cannot vouch for it ("ham" answering "positive" fits some examples and reads wrong), even
        where they lean its way (``names_agree``, `ShotScore.names_agree`)."""
        how = {
            "names": "labels matched by name",
            "meaning": "labels matched by the meaning of their names",
            "examples": f"labels mapped by your examples (the names do not decide it; {HELD_OUT})",
        }[self.how]
        if self.how == "examples" and self.names_weighed:
            how = f"labels mapped by your examples weighed with the meaning of the names ({HELD_OUT})"
        if self.how == "examples" and self.numbers_follow is not None:
            n = len(self.model_class)
            how = (
                "labels mapped by your examples weighed with your codes read as its class numbers ("
                + (
                    f"{self.numbers_follow} of your {n} labels are where their numbers put them, "
                    "labels without examples among them"
                    if self.numbers_hold
                    else "your examples do not bear that numbering out"
                )
                + f"; {HELD_OUT})"
            )
        text = how + (", answers restricted to your labels" if self.restricted else "")
        if self.how == "names" or not user_names or not model_names:
            return text
        pairs = [f"its {model_names[m]!r} is your {user_names[u]!r}" for u, m in enumerate(self.model_class)]
        shown = ", ".join(pairs[:MAP_PAIRS_SHOWN]) + (", …" if len(pairs) > MAP_PAIRS_SHOWN else "")
        text += f" ({shown})"
        if self.how == "examples" and not (labels_are_codes(user_names) or labels_are_codes(model_names)):
            text += (
                "; its names lean the same way but do not decide it"
                if names_agree
                else "; its names do not say so"
            ) + ": check that the map fits your task before you use it"
        return text


def map_by_name(user_names: Sequence[str], model_names: Sequence[str]) -> LabelMap | None:
    """The map of equal names (after `normalise_label`), when every user label has one."""
    position = {normalise_label(n): i for i, n in enumerate(model_names)}
    try:
        classes = tuple(position[normalise_label(n)] for n in user_names)
    except KeyError:
        return None
    return LabelMap(classes, "names", len(model_names))


def _assignment(gain: np.ndarray) -> tuple[np.ndarray, float]:
    """Best injective map of rows (user labels) to columns (model classes) and its total gain."""
    rows, cols = linear_sum_assignment(-gain)
    out = np.empty(gain.shape[0], dtype=np.int64)
    out[rows] = cols
    return out, float(gain[rows, cols].sum())


def map_by_meaning(
    user_names: Sequence[str], model_names: Sequence[str], similarity: np.ndarray, margin: float = NAME_MARGIN
) -> LabelMap | None:
    """The map the names' meaning gives, or None when they do not decide it.

    ``similarity[i, j]`` compares user label i with model label j (cosine of their embeddings).
    The best assignment must beat the best assignment that moves any one user label elsewhere by
    ``margin`` per label that assignment moves (a swap moves two, a move to an unused class one),
    so the margin does not shrink with the number of labels; codes on either side never decide.
    """
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.shape != (len(user_names), len(model_names)) or sim.shape[0] > sim.shape[1]:
        raise ValueError(f"similarity of shape {sim.shape} for {len(user_names)}×{len(model_names)} labels")
    if labels_are_codes(user_names) or labels_are_codes(model_names):
        return None
    best, clear_by = meaning_margin(sim)
    if clear_by < margin:
        return None
    return LabelMap(tuple(int(j) for j in best), "meaning", len(model_names))


def meaning_margin(similarity: np.ndarray) -> tuple[np.ndarray, float]:
    """The best assignment of user labels (rows) to model classes (columns) and its margin: the
    least of its `label_margins`."""
    best, margins = label_margins(similarity)
    return best, float(margins.min()) if len(margins) else math.inf


def label_margins(similarity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The best assignment of user labels (rows) to model classes (columns) and, for each user
    label, what the best assignment that moves that label elsewhere loses per label it moves:
    how clearly the names place that label."""
    sim = np.asarray(similarity, dtype=np.float64)
    best, total = _assignment(sim)
    margins = np.empty(len(best))
    for i, j in enumerate(best):
        forbidden = sim.copy()
        forbidden[i, j] = -1e9
        other, other_total = _assignment(forbidden)
        margins[i] = (total - other_total) / max(1, int(np.count_nonzero(other != best)))
    return best, margins


def map_by_examples(
    predicted: np.ndarray,
    probs: np.ndarray | None,
    labels: np.ndarray,
    n_user: int,
    n_model: int,
    log_prior: np.ndarray | None = None,
    order: Sequence[int] | None = None,
) -> LabelMap:
    """The injective map the user's examples choose: the one with the shortest two-part code,
    the names' price of the map (``log_prior``, `names_log_prior`: their reading of each pair,
    where both sides' names carry meaning; with codes every map is priced alike) plus the
    examples' cost under it (the log-probability the model gives each example's mapped class, at
    least `FLOOR_SHARE_OF_CHANCE` of chance as in the score; a model without probabilities gives
    1 to its answer). Hungarian on the sum.

    So the examples decide where the names are absent or unclear, and clear names decide what a
    few examples cannot: 64 examples cannot say which of a 150-intent model's classes answers
    each of a user's 150 renamed labels, and a map by counts alone paired "distance class" with
    "travel notification" (34% held out) and, where the model erred on one example, "spelling"
    with "bill due class". Nor do a handful of an inverted classifier's answers turn clear names
    round: it keeps the names' map and scores as badly as it does. Optimistic with a handful of
    examples: it is chosen on the examples it is then scored on (`held_out_score`).

    Where the user's numbered codes read a map (``order``, `code_order`: "3" is the model's
    class 3) and the examples bear it out, each label keeps its number unless its examples place
    it elsewhere by more than leaving costs, and a label with no example keeps its number (64
    examples leave most of 150 intents without one, and nothing else can place them); where the
    examples' own best map is the shorter code of them, it stands (`_against_reading`). Such a map is priced
    by the shorter of the uniform code and the map told as exceptions to the reading
    (`reading_nats`, `held_out_score`); for two labels the reading is never the cheaper code
    (log 3 against log 2), so it lowers no binary map's price."""
    labels = np.asarray(labels, dtype=np.int64)
    predicted = np.asarray(predicted, dtype=np.int64)
    if probs is None:
        given = np.zeros((len(labels), n_model))
        given[np.arange(len(labels)), predicted] = 1.0
    else:
        given = np.asarray(probs, dtype=np.float64)
    gain = np.zeros((n_user, n_model))
    np.add.at(gain, labels, np.log(np.clip(given, FLOOR_SHARE_OF_CHANCE / max(1, n_user), 1.0)))
    if log_prior is not None:
        prior = np.asarray(log_prior, dtype=np.float64)
        if prior.shape != (n_user, n_model):
            raise ValueError(f"names' reading of shape {prior.shape} for {n_user}×{n_model} labels")
        gain += prior
    if order is not None:
        return _against_reading(gain, np.unique(labels), order, n_model)
    best, _ = _assignment(gain)
    return LabelMap(tuple(int(j) for j in best), "examples", n_model, names_weighed=log_prior is not None)


def _against_reading(gain: np.ndarray, seen: np.ndarray, order: Sequence[int], n_model: int) -> LabelMap:
    """`map_by_examples` where the codes read ``order``: each label with examples keeps its
    number unless they place it elsewhere by more than what leaving costs.

    The reading is a mixture: each label keeps its number, or with probability ε goes to any
    other class. ε is fitted to the examples by EM on the labels that have some (their
    likelihood under each class summed over the other classes, so no one map is assumed), and
    each label pays log((1 − ε)(n_model − 1) / ε) to leave its number. The map so chosen stands
    where it is the shorter two-part code of the examples (`_reading_is_shorter`): the labels with
    examples told as exceptions to the numbers (`reading_nats`) plus the examples' cost under it,
    against the examples' own best map told in full plus theirs. Then labels without examples
    keep their numbers; otherwise the examples' own best map stands, and labels without examples
    (those not in ``seen``) sit on their numbers only where nothing else wants those classes.

    A weak model of many classes is the case this is for: one right on a third of 60 tweets of
    20 emoji, where chance is a twentieth, answers most labels' examples with its two or three
    favourite classes, so the mixture's "any other class" explains many labels better than their
    numbers; but only one label can be mapped to each favourite, and the numbers tell the map in a
    few nats where the examples' own map costs log 20! (42)."""
    n_user = gain.shape[0]
    read = np.asarray(order, dtype=np.int64)
    if read.shape != (n_user,) or len(set(read.tolist())) < n_user or int(read.max()) >= n_model:
        raise ValueError(f"codes' reading {tuple(read.tolist())} for {n_user}×{n_model} labels")
    rows = np.arange(n_user)
    tie_break = np.zeros_like(gain)
    tie_break[rows, read] = 1e-6
    best, _ = _assignment(gain + tie_break)
    holds = False
    if len(seen) and n_model > 1:
        kept = gain[seen, read[seen]]
        others = gain[seen].copy()
        others[np.arange(len(seen)), read[seen]] = -np.inf
        elsewhere = logsumexp(others, axis=1) - math.log(n_model - 1)  # the others' mean likelihood
        eps = _leaving_share(kept, elsewhere)
        paid = gain + tie_break
        paid[rows, read] += max(0.0, math.log((1.0 - eps) * (n_model - 1) / eps))
        by_numbers, _ = _assignment(paid)
        holds = _reading_is_shorter(gain, seen, by_numbers, best, read, n_model)
        if holds:
            best = by_numbers
    return LabelMap(
        tuple(int(j) for j in best),
        "examples",
        n_model,
        numbers_follow=int(np.count_nonzero(best == read)),
        numbers_hold=holds,
    )


def _reading_is_shorter(
    gain: np.ndarray,
    seen: np.ndarray,
    by_numbers: np.ndarray,
    own: np.ndarray,
    read: np.ndarray,
    n_model: int,
) -> bool:
    """Whether the labels with examples (``seen``) are told in fewer nats by the map that keeps
    the codes' numbers where it can (``by_numbers``), as exceptions to the reading, than by the
    examples' own best map (``own``), as one of all injective maps of those labels: each with the
    examples' cost under it (``gain``, their log-likelihood). Labels without examples are left
    out of both: their place is not evidence. Where most labels keep their numbers the reading is
    the shorter code (log 21 nats for 20 labels that all keep them, against log 20! = 42), where
    most leave them the examples' own map is (exceptions cost log(n_model − 1) each); for two
    labels the reading never is (log 3 against log 2), so numbers decide no binary map."""
    numbered = -float(gain[seen, by_numbers[seen]].sum()) + reading_nats(
        by_numbers[seen], read[seen], n_model
    )
    free = -float(gain[seen, own[seen]].sum()) + _uniform_nats(len(seen), n_model)
    return numbered < free


def _leaving_share(kept: np.ndarray, elsewhere: np.ndarray, rounds: int = 100) -> float:
    """EM for the share ε of labels that leave their numbers, given each label's log-likelihood
    under its read class (``kept``) and its mean under the others (``elsewhere``); kept within
    1 / (2 × labels + 2) of 0 and 1, so neither reading is ever certain."""
    bound = 1.0 / (2 * len(kept) + 2)
    eps = 0.5
    for _ in range(rounds):
        leave = math.log(eps) + elsewhere
        share = float(np.mean(np.exp(leave - np.logaddexp(np.log1p(-eps) + kept, leave))))
        share = min(max(share, bound), 1.0 - bound)
        if abs(share - eps) < 1e-6:
            return share
        eps = share
    return eps


def answers(
    predicted: np.ndarray, probs: np.ndarray | None, label_map: LabelMap
) -> tuple[np.ndarray, np.ndarray | None]:
    """A model's answers in the user's label ids, restricted to the mapped classes.

    With probabilities, the answer is the most probable mapped class (renormalised); without, a
    prediction of an unmapped class is no answer (-1, counted wrong).
    """
    classes = np.asarray(label_map.model_class, dtype=np.int64)
    if probs is not None:
        kept = np.asarray(probs, dtype=np.float64)[:, classes]
        kept = kept / np.clip(kept.sum(axis=1, keepdims=True), 1e-12, None)
        return kept.argmax(axis=1), kept
    to_user = np.full(label_map.n_model_classes, -1, dtype=np.int64)
    to_user[classes] = np.arange(len(classes))
    return to_user[np.asarray(predicted, dtype=np.int64)], None


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


def map_cost(n_user: int, n_model: int, n_examples: int, names_nats: float | None = None) -> float:
    """The description length, in nats per example, of a label map chosen by the examples.

    Without names to go by (codes on either side), the map is one of all injective maps of
    ``n_user`` labels into ``n_model`` classes, each as likely: log of their number, over the
    examples. A relabelling of two classes costs log 2; two of a six-class model's classes, log 30.
    On a handful of examples some of many maps fits by luck (a question-type model restricted to
    two classes "81% right" on 16 sentiment shots, 0.58 on their test split, seen on three markets
    of the identification benchmark); the cost is the two-part code's price of naming the map.

    Where both sides' names carry meaning, ``names_nats`` is the map's cost under the names' own
    reading of it (`names_map_nats`): the dock then names the map with whichever code is shorter,
    plus log 2 to say which. A map the names agree with ("rage" onto "anger" and "sorrow" onto
    "sadness" of a four-emotion model) costs little even when it picks a few of many classes; one
    they argue against ("bad" / "good" onto two question types) costs the uniform price and a bit.
    No constant to tune: the names' reading is the space's own label-name head. Where the user's
    numbered codes read a map (`code_order`), ``names_nats`` is the map told as exceptions to that
    reading (`reading_nats`), with the same choice of the shorter code."""
    if n_examples <= 0 or n_model < n_user:
        return 0.0
    uniform = _uniform_nats(n_user, n_model)
    if names_nats is None:
        return uniform / n_examples
    return (min(uniform, names_nats) + math.log(2)) / n_examples


def names_log_prior(
    user_names: Sequence[str], model_names: Sequence[str], similarity: np.ndarray, temperature: float
) -> np.ndarray | None:
    """How the names read a map: ``[i, j]`` is the log-probability the space's label-name head
    gives model class j for user label i's name taken as a text (softmax of the names' cosine over
    the head's temperature). None where either side's names are codes: they say nothing.

    Every label's row at full weight, however unclearly its name places it. Reading only the
    labels placed by the meaning margin (`label_margins`; the others alike on every class) lifted
    a German davidson_hate user whose "beleidigende Sprache" the English base reads nearer "hate
    speech" (0.18 → 0.40 of the oracle), but lost more than it gained (2026-12-06, full profile:
    market 0 0.957 → 0.957, market 1 0.963 → 0.961 normalised, renamed sst5 users 1.00 →
    0.76–0.82): the names place most labels of a whole label set that they place unclearly right
    all the same (86% chosen-on, 77% held out: `pavedock bench label-maps`, "Label by label"),
    and the examples alone erred more on those than the names did."""
    if labels_are_codes(user_names) or labels_are_codes(model_names):
        return None
    logits = np.asarray(similarity, dtype=np.float64) / temperature
    if logits.shape != (len(user_names), len(model_names)):
        raise ValueError(
            f"similarity of shape {logits.shape} for {len(user_names)}×{len(model_names)} labels"
        )
    logits -= logits.max(axis=1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def names_map_nats(label_map: LabelMap, log_prior: np.ndarray, labels: Iterable[int] | None = None) -> float:
    """The map's description length under the names' reading (`names_log_prior`), in nats: of
    the user's ``labels`` (all of them by default)."""
    which = range(len(label_map.model_class)) if labels is None else labels
    return float(-sum(log_prior[int(u), label_map.model_class[int(u)]] for u in which))


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
    ``log_prior`` where they have one: `names_log_prior`, or as exceptions to the codes' reading
    ``order`` where that is shorter: `reading_nats`); the map shown is the one chosen on all of
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
            order if label_map.numbers_follow is not None else None,
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
    if order is not None and label_map.numbers_follow is not None:
        kept = np.asarray(label_map.model_class, dtype=np.int64)[seen]
        paid = reading_nats(kept, np.asarray(order, dtype=np.int64)[seen], n_model)
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


def choose_label_map(
    user_names: Sequence[str],
    model_names: Sequence[str],
    *,
    similarity: np.ndarray | None = None,
    predicted: np.ndarray | None = None,
    probs: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    log_prior: np.ndarray | None = None,
    order: Sequence[int] | None = None,
) -> LabelMap | None:
    """By name, else by meaning (given the names' ``similarity``), else by the user's examples
    (given the model's ``predicted`` classes on them and their ``labels``; weighed with the names'
    reading ``log_prior`` where there is one, or with the numbered codes' reading ``order``,
    `code_order`: `map_by_examples`); None when none applies:
    fewer model classes than user labels, nothing to decide by, or a few of a larger model's
    meaningful classes with no names' reading to price the map by (`examples_may_map`).

    The meaning alone fixes a relabelling (as many classes). Where it would pick a few of a larger
    model's classes and there are examples, the examples pick them, priced by the names' reading
    of the map (`map_cost`, cheap where the names agree): the margin cannot tell another task's
    labels from a renaming of the user's (`pavedock bench label-maps`: maps onto other tasks'
    label sets clear it), and a mr user's "bad" / "good" read as two of a news model's topics by
    meaning alone came first on two markets of the identification benchmark."""
    if len(model_names) < len(user_names):
        return None
    by_name = map_by_name(user_names, model_names)
    if by_name is not None:
        return by_name
    examples = predicted is not None and labels is not None
    if similarity is not None:
        by_meaning = map_by_meaning(user_names, model_names, similarity)
        if by_meaning is not None and not (examples and by_meaning.restricted):
            return by_meaning
    if (
        predicted is not None
        and labels is not None
        and examples_may_map(user_names, model_names, names_read=similarity is not None)
    ):
        return map_by_examples(predicted, probs, labels, len(user_names), len(model_names), log_prior, order)
    return None


def examples_may_map(
    user_names: Sequence[str], model_names: Sequence[str], *, names_read: bool = False
) -> bool:
    """Whether the user's examples may choose a map from the model's labels to the user's.

    Yes for a relabelling (as many classes: "normal message" for "ham", or codes on either side),
    priced by `map_cost`. Picking a few of a larger model's meaningful classes only
    where the names' similarity was measured (``names_read``), so the map is priced by what the
    names say of it: unpriced, a question-type classifier's "entity" and "description" read as
    "bad" and "good" fitted a handful of sentiment examples and won (a held-out market of the
    identification benchmark); priced, that map costs its uniform price and a bit more, while
    "international" / "tech" onto a news model's "World" / "Sci/Tech" costs little."""
    if len(model_names) == len(user_names) or names_read:
        return True
    return labels_are_codes(user_names) or labels_are_codes(model_names)


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
    """No reading backs any one alignment (names whose meaning maps nothing, letters): ``names``
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
    language, rare words) and letters are in the same place, with no reading to fall back on.
    Neither is a fact, which is why both count only where they stand out (`with_alignment`)."""
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
) -> list[Ranked]:
    """The final order (module docstring): checked and better than chance by shot score; the
    unchecked that answer the user's labels with a map (by name), in ``ordered``'s order (it must
    be `by_tier`'s); checked but no better than chance, in ``ordered``'s order; the unchecked that would
    need a label map nobody chose, in ``ordered``'s order; those that cannot answer. Stable: equal
    scores keep ``ordered``'s order."""
    maps = maps or {}
    shots = shots or {}
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

    return by_shot_score(0) + in_order(1) + in_order(2) + in_order(3) + in_order(4)


def as_ranked(candidates: Sequence[Candidate]) -> list[Ranked]:
    """Candidates in their given (cosine) order, for a spec ranked without the task's labels."""
    return [Ranked(c.id, c.score, Tier.LABEL_MAP, None, None, 0.0) for c in candidates]
