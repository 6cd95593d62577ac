"""Which of a learnware's classes answers each of a user's labels, and what a map costs.

Users and developers name classes however they like ("positive", "pos", "good", "1",
"LABEL_1", another language), so a learnware that does the user's task may still need a label
map to answer in the user's labels. This module decides what a learnware can answer
(`tier_of`), which map turns its answers into the user's labels (`choose_label_map`), and what
a map the examples chose costs (`map_cost`); `app.ml.ranking` uses them to order the matches.

The map is chosen by name where the names match; by meaning where both sides' names carry
meaning and their embeddings agree on one map by a clear margin per label moved ("good" is
"positive": `map_by_meaning`), though a few of a larger model's classes are the examples' to
pick where there are some; by the user's examples where the names are codes ("0", "LABEL_1")
or do not decide it, weighed with the names' reading where they carry meaning
(`names_log_prior`), so clear names settle what a few examples cannot, and with the user's
numbered codes read as the model's class numbers ("3" is its class 3, the order a dataset's
class ids keep: `code_order`), or counted from another of its classes or backwards
(`best_numbering`), where the examples bear that reading out (`map_by_examples`).
A map chosen from data alone can be absurd (an inverted spam filter's "ham" onto the user's
word for spam), which is why meaning comes first, and why a map the examples chose pays for
itself (`map_cost`): its description length, under the names' own reading of the map where
both sides' names carry meaning.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import logsumexp

FLOOR_SHARE_OF_CHANCE = 0.5
"""The least probability a shot counts with, as a share of chance (1 / the user's label count):
a confident mistake costs log(0.25) on two labels, not −∞. Unbounded, a few confident mistakes
of a good model (a spam filter right 14 of 16 times, and sure) lost to a model that hedges on
everything (a sentiment model mapped onto ham / spam, near 0.5 each time). On the quick
identification benchmark a floor of 0.001 / 0.2 / 0.3 / 0.4 / 0.5 / 0.6 of chance gave a mean
normalised accuracy of 0.976 / 0.976 / 0.981 / 0.979 / 0.982 / 0.981 and, for users with no
learnware of their own, 0.902 / 0.902 / 0.953 / 0.953 / 0.967 / 0.967; chosen there."""

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

MAP_PAIRS_SHOWN = 6
"""How many of a label map's pairs a match's reason spells out (the full map is in `label_map`)."""

_CODE = re.compile(r"^(?:label|class|cls|category|cat|c|l|y|id)?[\s_\-#:]*\d+$|^[a-z]$", re.IGNORECASE)

_TRAILING_NUMBER = re.compile(r"\d+$")

MapHow = Literal["names", "meaning", "examples"]


HELD_OUT = (
    "its accuracy there scores each example under the map chosen on the others, a label's only "
    "example under the map chosen on all of them, which the map's price pays for"
)
"""How a match's accuracy on the examples was scored where they chose its map (`ranking.held_out_score`)."""


def normalise_label(name: str) -> str:
    """Case, surrounding space, underscores and hyphens do not make another label."""
    return " ".join(re.sub(r"[_\-]+", " ", str(name)).split()).casefold()


def labels_are_codes(names: Sequence[str]) -> bool:
    """Names that carry no meaning: numbers, ``LABEL_3``, ``class 2``, single letters."""
    return all(_CODE.match(normalise_label(n)) for n in names)


def _lettered(names: Sequence[str]) -> bool:
    """Names with no number in them: among codes (`labels_are_codes`), single letters."""
    return all(_TRAILING_NUMBER.search(normalise_label(name)) is None for name in names)


def _code_numbers(names: Sequence[str]) -> list[int] | None:
    """The numbers of numbered codes ("3", "LABEL_3", "class 3"), or of letter codes counted
    from A as 0 ("A", "b": a list or an answer sheet keeps its classes' order as numbers do),
    distinct; None otherwise, or where numbers and letters are mixed."""
    if not labels_are_codes(names):
        return None
    if _lettered(names):
        numbers = [ord(normalise_label(name)) - ord("a") for name in names]
    else:
        found = [_TRAILING_NUMBER.search(normalise_label(name)) for name in names]
        if any(f is None for f in found):
            return None  # letters and numbers mixed
        numbers = [int(f.group()) for f in found if f is not None]
    return numbers if len(set(numbers)) == len(numbers) else None


def code_order(user_names: Sequence[str], model_names: Sequence[str]) -> tuple[int, ...] | None:
    """The map a user's numbered codes read: code k is the model's class k (letters count from
    A as 0). None where they read none (names, numbers out of the model's range).

    Numbered labels are most often a dataset's class ids, positions in its list of classes, the
    order a model trained on that dataset keeps (a Hugging Face model's ``id2label``). So the
    user's "k" reads as the model's class numbered k where its own labels are numbered codes too
    ("LABEL_k"), else as the k-th of its classes, counted from 0, or from 1 where numbers run up
    to the model's class count (letters always start at A: "B" to "F" are five of a longer list,
    not five classes counted from 1). A reading, not a fact: each label the examples place
    elsewhere pays for leaving it (`map_by_examples`), and where most leave it, the reading is
    dropped."""
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
    counted_from_one = min(numbers) >= 1 and max(numbers) <= n_model
    if counted_from_one and not _lettered(user_names):
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


@dataclass(frozen=True)
class Numbering:
    """How a user's numbered codes were read against a model's classes: the codes' own reading
    (`code_order`), or that reading counted from another of the model's classes (``shift``),
    backwards or not (``reversed``), where the examples bear that out (`best_numbering`)."""

    order: tuple[int, ...]
    """The model's class each user label is read as."""
    shift: int = 0
    reversed: bool = False
    nats: float = 0.0
    """What naming this numbering among the others costs: 0 for the codes' own reading, log of
    the other numberings' count for any of them (a two-part code's first part)."""

    @property
    def own(self) -> bool:
        """The codes' own reading: "3" is the model's class 3."""
        return self.shift == 0 and not self.reversed

    def describe(self) -> str:
        if self.own:
            return "your codes read as its class numbers"
        counted = "backwards" if self.reversed else "in order"
        return f"your codes read as its class numbers counted {counted}, shifted by {self.shift}"


def numberings(order: Sequence[int] | np.ndarray, n_model: int) -> np.ndarray:
    """Every numbering of the codes' reading ``order`` (`code_order`) by a model of ``n_model``
    classes: rows (reversed, shift) for shift 0…n_model − 1, forwards then backwards, each the
    model's class for every user label (``[0]`` is the codes' own reading). A dataset renumbered
    from 1, or counted from another class, or a rating scale counted from its best grade keeps
    its classes' order while moving every number: a person reads such a map at a glance, where
    a label-by-label map of 20 emoji costs log 20! nats to tell."""
    read = np.asarray(order, dtype=np.int64)
    shifts = np.arange(n_model)
    forwards = (read[None, :] + shifts[:, None]) % n_model
    backwards = (n_model - 1 - read[None, :] + shifts[:, None]) % n_model
    return np.concatenate([forwards, backwards])


def best_numbering(gain: np.ndarray, seen: np.ndarray, order: Sequence[int], n_model: int) -> Numbering:
    """The numbering of the user's codes (`numberings`) that tells the examples in the fewest
    nats: their log-likelihood with every label where that numbering puts it (``gain``, rows the
    labels in ``seen`` with examples), less what naming the numbering costs (`Numbering.nats`:
    log(2 n_model − 1) for any but the codes' own). So a numbering other than the codes' own
    stands only where the examples fit it by more than that (3.7 nats for 20 classes, 5.7 for
    150): 64 examples of a 150-intent model renumbered from class 40 do, a weak model's few
    lucky answers seldom do. Where it stands, it places the labels without examples too, which
    nothing else can: 64 examples leave 86 of 150 intents without one.

    Only a relabelling (as many user labels as model classes) is read in another numbering: the
    same classes counted from elsewhere. A few of a larger model's classes counted from one of
    them is a window no one numbers by, and it named cheaply a map of five sentiment grades onto
    five of seven snips intents that fitted 40 examples by luck (the identification benchmark,
    market 1). Two classes have one numbering other than their own, which is the map the
    examples choose anyway: no numbering is read for them either."""
    read = tuple(int(j) for j in order)
    if n_model < 3 or gain.shape[0] != n_model or not len(seen):
        return Numbering(read)
    price = math.log(2 * n_model - 1)
    fit = gain[seen[None, :], numberings(np.asarray(read)[seen], n_model)].sum(axis=1) - price
    fit[0] += price
    best = int(np.argmax(fit))  # the codes' own reading where it ties
    if best == 0:
        return Numbering(read)
    chosen = numberings(read, n_model)[best]
    return Numbering(
        tuple(int(j) for j in chosen), shift=best % n_model, reversed=best >= n_model, nats=price
    )


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
    numbering: Numbering | None = None
    """For a map the examples chose against the user's numbered codes read as the model's class
    numbers (`code_order`): the numbering it was weighed against (`best_numbering`), the codes'
    own or another the examples bear out better; None where the codes read no map."""
    numbers_hold: bool = False
    """Whether the examples bear that numbering out (the map kept near the numbers is the shorter
    code of the examples than their own best map: `map_by_examples`); otherwise it only places
    labels without examples where nothing else wants their classes."""

    @property
    def numbers_follow(self) -> int | None:
        """How many of the user's labels the map keeps where the numbering puts them; None where
        the codes read no map."""
        if self.numbering is None:
            return None
        return sum(1 for m, r in zip(self.model_class, self.numbering.order, strict=True) if m == r)

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
        if self.how == "examples" and self.numbering is not None:
            n = len(self.model_class)
            how = (
                f"labels mapped by your examples weighed with {self.numbering.describe()} ("
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
    examples: it is chosen on the examples it is then scored on (`ranking.held_out_score`).

    Where the user's numbered codes read a map (``order``, `code_order`: "3" is the model's
    class 3) and the examples bear it out, each label keeps its number unless its examples place
    it elsewhere by more than leaving costs, and a label with no example keeps its number (64
    examples leave most of 150 intents without one, and nothing else can place them); where the
    examples' own best map is the shorter code of them, it stands (`_against_reading`). Such a map is priced
    by the shorter of the uniform code and the map told as exceptions to the reading
    (`reading_nats`, `ranking.held_out_score`); for two labels the reading is never the cheaper code
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
    number unless they place it elsewhere by more than what leaving costs. The numbers are
    those of the numbering the examples bear out best (`best_numbering`): the codes' own reading,
    or the same counted from another class or backwards, paid for in the two-part code below.

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
    numbering = best_numbering(gain, seen, order, n_model)
    read = np.asarray(numbering.order, dtype=np.int64)
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
        holds = _reading_is_shorter(gain, seen, by_numbers, best, read, n_model, numbering.nats)
        if holds:
            best = by_numbers
    return LabelMap(
        tuple(int(j) for j in best),
        "examples",
        n_model,
        numbering=numbering,
        numbers_hold=holds,
    )


def _reading_is_shorter(
    gain: np.ndarray,
    seen: np.ndarray,
    by_numbers: np.ndarray,
    own: np.ndarray,
    read: np.ndarray,
    n_model: int,
    numbering_nats: float = 0.0,
) -> bool:
    """Whether the labels with examples (``seen``) are told in fewer nats by the map that keeps
    the codes' numbers where it can (``by_numbers``), as exceptions to the reading, than by the
    examples' own best map (``own``), as one of all injective maps of those labels: each with the
    examples' cost under it (``gain``, their log-likelihood). Labels without examples are left
    out of both: their place is not evidence. Where most labels keep their numbers the reading is
    the shorter code (log 21 nats for 20 labels that all keep them, against log 20! = 42), where
    most leave them the examples' own map is (exceptions cost log(n_model − 1) each); for two
    labels the reading never is (log 3 against log 2), so numbers decide no binary map. A
    numbering other than the codes' own adds what naming it costs (``numbering_nats``)."""
    numbered = (
        -float(gain[seen, by_numbers[seen]].sum())
        + reading_nats(by_numbers[seen], read[seen], n_model)
        + numbering_nats
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
