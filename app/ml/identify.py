"""Identification: rank specs against a query spec by cosine similarity with FAISS.

One index per spec space. Vectors are L2-normalised float32 and searched by inner
product, so the score is the cosine. Ids are the caller's (the dock uses database ids).
"""

from __future__ import annotations

import threading
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
