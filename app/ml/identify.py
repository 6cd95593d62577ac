"""Identification: rank specs against a query spec by cosine similarity with FAISS.

One index per spec space. Vectors are L2-normalised float32 and searched by inner
product, so the score is the cosine. Ids are the caller's (the dock uses database ids).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from app.ml.errors import IncompatibleSpec


@dataclass(frozen=True)
class Match:
    id: int
    score: float


def _normalise(vectors: np.ndarray, dim: int) -> np.ndarray:
    arr = np.ascontiguousarray(np.atleast_2d(np.asarray(vectors, dtype=np.float32)))
    if arr.shape[1] != dim:
        raise IncompatibleSpec(f"spec has {arr.shape[1]} values, index needs {dim}")
    if not np.all(np.isfinite(arr)):
        raise IncompatibleSpec("spec has NaN or infinite values")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise IncompatibleSpec("spec is all zeros")
    return arr / norms


class SpecIndex:
    """A cosine index over the specs of one space (thread-safe)."""

    def __init__(self, space_id: str, dim: int):
        self.space_id = space_id
        self.dim = dim
        # faiss's stubs miss the numpy overloads of add/remove/search, hence Any.
        self._index: Any = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def ids(self) -> set[int]:
        with self._lock:
            return set(faiss.vector_to_array(self._index.id_map).tolist())

    def add(self, ids: list[int] | np.ndarray, vectors: np.ndarray, *, space_id: str | None = None) -> None:
        """Add (or replace) specs under ``ids``: an id is never indexed twice."""
        if space_id is not None and space_id != self.space_id:
            raise IncompatibleSpec(f"spec is of space {space_id}, index is of {self.space_id}")
        id_arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        arr = _normalise(vectors, self.dim)
        if arr.shape[0] != id_arr.shape[0]:
            raise ValueError(f"{id_arr.shape[0]} ids for {arr.shape[0]} vectors")
        if len(set(id_arr.tolist())) != len(id_arr):
            raise ValueError("duplicate ids in one add")
        with self._lock:
            self._index.remove_ids(id_arr)
            self._index.add_with_ids(arr, id_arr)

    def remove(self, ids: list[int] | np.ndarray) -> int:
        with self._lock:
            return int(self._index.remove_ids(np.asarray(ids, dtype=np.int64).reshape(-1)))

    def search(
        self, query: np.ndarray, k: int = 10, *, space_id: str | None = None, exclude: set[int] | None = None
    ) -> list[Match]:
        """Top-``k`` ids by cosine with ``query``, best first (ids in ``exclude`` skipped)."""
        if space_id is not None and space_id != self.space_id:
            raise IncompatibleSpec(f"query is of space {space_id}, index is of {self.space_id}")
        q = _normalise(query, self.dim)
        with self._lock:
            n = len(self)
            if n == 0 or k <= 0:
                return []
            want = min(n, k + len(exclude or ()))
            scores, found = self._index.search(q, want)
        out = [
            Match(int(i), float(s))
            for s, i in zip(scores[0], found[0], strict=True)
            if i >= 0 and (not exclude or int(i) not in exclude)
        ]
        return out[:k]

    def save(self, path: Path) -> None:
        """Write atomically (temp file, then rename), so a reader never sees half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with self._lock:
            faiss.write_index(self._index, str(tmp))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path, space_id: str, dim: int) -> SpecIndex:
        index = cls(space_id, dim)
        loaded = faiss.read_index(str(path))
        if loaded.d != dim:
            raise IncompatibleSpec(f"index file {path} has dim {loaded.d}, space needs {dim}")
        index._index = loaded
        return index


def rank_specs(query: np.ndarray, specs: dict[int, np.ndarray], k: int | None = None) -> list[Match]:
    """Rank a small in-memory set of specs (benchmarks, tests) through the same FAISS path."""
    if not specs:
        return []
    dim = int(np.asarray(query).shape[-1])
    index = SpecIndex("adhoc", dim)
    ids = list(specs)
    index.add(ids, np.stack([specs[i] for i in ids]))
    return index.search(query, k or len(ids))


def label_compatible_first(
    matches: list[Match], label_names: Mapping[int, Sequence[str]], user_names: Sequence[str]
) -> list[Match]:
    """Re-rank in three tiers, each in its cosine order: learnwares whose label set is the user's
    (names compared case-insensitively); then those with as many classes (the user may have
    named them differently, and a one-to-one label map exists); then the rest. A learnware with a
    different number of classes cannot answer the user's question as it is, however close its spec.

    Matching names by their embeddings was measured and rejected: on the base encoder the true
    renamings of the benchmark's label sets score as low as 0.13 (min cosine of the best
    assignment) while unrelated label sets reach 0.44 (docs/benchmarks/identification.md).
    """
    wanted = {name.strip().casefold() for name in user_names}

    def tier(match: Match) -> int:
        names = label_names.get(match.id, ())
        if {name.strip().casefold() for name in names} == wanted:
            return 0
        return 1 if len(set(names)) == len(wanted) else 2

    tiers = [tier(match) for match in matches]
    return [match for level in range(3) for match, t in zip(matches, tiers, strict=True) if t == level]


SHOT_CHECK_K = 5
"""How many of the top matches the shot check runs on the user's examples."""


@dataclass(frozen=True, order=True)
class ShotScore:
    """How a learnware did on a user's labelled examples. Orders by accuracy, then by confidence."""

    accuracy: float
    confidence: float
    """Mean probability it gave the true labels: splits equal accuracies (a handful of examples
    leaves many ties) in favour of the model that is surer where it is right and less sure where
    it is wrong. Equals the accuracy for a model that gives no probabilities."""


def shot_score(
    predicted: np.ndarray, probs: np.ndarray | None, labels: np.ndarray, mapping: np.ndarray
) -> ShotScore:
    """Score a model's predictions on a user's examples.

    `predicted` (N,) and `probs` (N, C) are in the model's class ids, `labels` (N,) in the user's,
    and `mapping[c]` is the user's label id of the model's class c (one-to-one).
    """
    labels = np.asarray(labels, dtype=np.int64)
    mapping = np.asarray(mapping, dtype=np.int64)
    accuracy = float(np.mean(mapping[np.asarray(predicted, dtype=np.int64)] == labels))
    if probs is None:
        return ShotScore(accuracy, accuracy)
    probs = np.asarray(probs, dtype=np.float64)
    if probs.shape != (len(labels), len(mapping)):
        raise ValueError(
            f"probabilities of shape {probs.shape} for {len(labels)} examples of {len(mapping)} classes"
        )
    in_user_ids = np.zeros((len(labels), int(max(mapping.max(), labels.max())) + 1))
    in_user_ids[:, mapping] = probs
    return ShotScore(accuracy, float(np.mean(in_user_ids[np.arange(len(labels)), labels])))


def shot_checked(
    matches: list[Match], shot_scores: Mapping[int, ShotScore | None], k: int = SHOT_CHECK_K
) -> list[Match]:
    """Re-rank the first `k` matches by how they did on the user's own labelled examples.

    The spec says which learnwares do the user's kind of task; it does not say which of several
    close ones is best at it (a LoRA learnware of a neighbouring sentiment task may beat the
    user's own task's linear one). The dock holds the user's examples while it fits the task spec,
    so it can run the top few candidates on them. `shot_scores` maps a learnware id to its
    `ShotScore` (accuracy, then confidence), None (or absent) where it could not be run or cannot
    serve the user's labels: those keep their places after the checked ones. Equal scores keep
    the incoming (cosine or label-tier) order, and everything after the first `k` is unchanged.
    """
    head, tail = matches[:k], matches[k:]
    scored = [(m, score) for m in head if (score := shot_scores.get(m.id)) is not None]
    # sorted() is stable under reverse=True too: equal scores keep their incoming order.
    checked = [m for m, _ in sorted(scored, key=lambda pair: pair[1], reverse=True)]
    unchecked = [m for m in head if shot_scores.get(m.id) is None]
    return checked + unchecked + tail


def best_label_map(predicted: np.ndarray, labels: np.ndarray, n_classes: int) -> tuple[np.ndarray, float]:
    """The one-to-one map from a model's class ids to a user's that makes the most of the user's
    examples right (Hungarian assignment on the confusion counts), and the accuracy under it.

    For a learnware with as many classes as the user's task but other names: the user may call
    "good" what the developer called "positive". With few examples the map is optimistic (it is
    chosen on the examples it is scored on), so the dock uses it only when no learnware of the
    user's own label names is among the matches checked.
    """
    from scipy.optimize import linear_sum_assignment

    confusion = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(confusion, (np.asarray(predicted, dtype=np.int64), np.asarray(labels, dtype=np.int64)), 1)
    rows, cols = linear_sum_assignment(-confusion)
    mapping = np.empty(n_classes, dtype=np.int64)
    mapping[rows] = cols
    return mapping, float(confusion[rows, cols].sum()) / max(1, len(labels))


def shot_candidates(
    matches: Sequence[Match], label_names: Mapping[int, Sequence[str]], user_names: Sequence[str], k: int
) -> tuple[list[int], bool]:
    """Which of the first `k` matches the shot check runs, and whether they need a label map.

    Those whose label set is the user's when any is among them (their labels map by name);
    otherwise those with as many classes as the user's task (mapped by `best_label_map`).
    """
    wanted = {name.strip().casefold() for name in user_names}
    head = matches[:k]
    same = [m.id for m in head if {n.strip().casefold() for n in label_names.get(m.id, ())} == wanted]
    if same:
        return same, False
    return [m.id for m in head if len(set(label_names.get(m.id, ()))) == len(wanted)], True
