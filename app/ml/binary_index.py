"""Sign specs as packed bits, and a two-stage index over them.

The default recipe's spec is a sign vector (every value +1 or −1). Packed one bit a value
(1 = +1) it is 32 times smaller than float32, and the cosine of two sign vectors of dimension
d is exact from their Hamming distance h: cos = 1 − 2h/d.

``BinarySpecIndex`` searches in two stages. The first picks the cells of an inverted file
(IVF) nearest the query: centroids from binary k-means on a *sketch* of each spec (a fixed,
seeded choice of its bytes), so assigning costs little. The second scores every spec of those
cells by its exact Hamming distance on the full packed spec. The specs are stored cell by cell
in one file that every process on the host memory-maps (one copy in the page cache), so a
probed cell is one contiguous read. Why cells and not a compressed score: the signal is spread
thin over all 36,864 coordinates (two specs of one task agree at cosine ≈ 0.13, the top ten
of a query lie within ≈ 0.01 of each other), and any sketch small enough to scan fast adds
more noise than that (docs/benchmarks/scale.md has the measurements); the cells, by contrast,
follow the market's tasks, and inside them the order is exact.

Below ``exact_below`` live specs (or before the cells are trained) every spec is scored.
Specs added since the last compaction sit in a small in-memory tail with their cells; removed
ones are tombstoned; ``compact`` rewrites the file (and trains the cells when there are enough)
while searches and changes go on.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from app.ml.errors import IncompatibleSpec
from app.ml.identify import Match


def packed_len(dim: int) -> int:
    """Bytes of a packed sign spec of ``dim`` values."""
    return (dim + 7) // 8


def is_sign_vector(vector: np.ndarray) -> bool:
    arr = np.asarray(vector)
    return bool(np.all((arr == 1) | (arr == -1)))


def pack_signs(vectors: np.ndarray) -> np.ndarray:
    """Pack sign vectors (N, d) or (d,) of ±1 into bits (N, ceil(d/8)) uint8, 1 = +1."""
    arr = np.asarray(vectors)
    if not is_sign_vector(arr):
        raise IncompatibleSpec("a sign spec must hold only +1 and -1")
    return np.packbits(arr > 0, axis=-1)


def unpack_signs(bits: np.ndarray, dim: int) -> np.ndarray:
    """The ±1 float32 vectors of packed sign specs."""
    unpacked = np.unpackbits(np.asarray(bits, dtype=np.uint8), axis=-1, count=dim)
    return unpacked.astype(np.float32) * 2 - 1


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint16)


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distances between packed rows of ``a`` (N, B) and ``b`` (B,) or (N, B)."""
    return np.asarray(_POPCOUNT[np.bitwise_xor(a, b)].sum(axis=-1, dtype=np.int64))


def cosine_from_hamming(distance: np.ndarray | int, dim: int) -> np.ndarray:
    return np.asarray(1.0 - 2.0 * np.asarray(distance, dtype=np.float64) / dim)


class ReadWriteLock:
    """Many readers at once, one writer alone: searches never queue behind each other, only
    behind an add, a remove or a rebuild (writers first once waiting, so they do not starve)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._waiting_writers = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._waiting_writers:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            while self._writing or self._readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


def _hammings(block: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Hamming distances of one packed query to each row of a C-contiguous block (FAISS's
    popcount kernel; it releases the GIL, so concurrent searches run in parallel)."""
    out = np.empty(block.shape[0], dtype=np.int32)
    if block.shape[0]:
        faiss.hammings(  # type: ignore[attr-defined]  # absent from faiss's stubs
            faiss.swig_ptr(query),
            faiss.swig_ptr(block),
            1,
            block.shape[0],
            block.shape[1],
            faiss.swig_ptr(out),
        )
    return out


@dataclass(frozen=True)
class BinaryIndexParams:
    """How the index is cut into cells and searched (chosen by measurement: see scale.md)."""

    exact_below: int = 20_000
    """Score every spec below this many live specs (an exact scan of 20,000 takes ~5 ms)."""
    sketch_bytes: int = 256
    """Bytes of a spec the cells are trained and assigned on (2,048 of its bits)."""
    rows_per_cell: int = 400
    """Cells: live specs / this, between 16 and 1,024."""
    nprobe: int = 8
    """Cells scored per query."""
    train_per_cell: int = 40
    """k-means sample: this many specs per cell."""
    compact_tail: float = 0.1
    """Compact (rewrite the file, retrain the cells) when the tail or the tombstones exceed this
    share of the file's rows."""
    seed: int = 0

    def nlist(self, n: int) -> int:
        return int(min(1024, max(16, n // self.rows_per_cell)))


class _Grow:
    """A numpy array grown by appending (capacity doubling)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        self.data = np.empty((16, *shape), dtype=dtype)
        self.n = 0

    def append(self, rows: np.ndarray) -> None:
        need = self.n + len(rows)
        if need > len(self.data):
            bigger = np.empty((max(need, 2 * len(self.data)), *self.data.shape[1:]), dtype=self.data.dtype)
            bigger[: self.n] = self.data[: self.n]
            self.data = bigger
        self.data[self.n : need] = rows
        self.n = need

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.n]


class BinarySpecIndex:
    """A two-stage cosine index over the packed sign specs of one space (same interface as
    ``SpecIndex``; thread-safe: searches share a read lock, changes take the write lock)."""

    encoding = "sign-bits"

    def __init__(self, space_id: str, dim: int, params: BinaryIndexParams | None = None):
        self.space_id = space_id
        self.dim = dim
        self.nbytes = packed_len(dim)
        self.params = params or BinaryIndexParams()
        rng = np.random.default_rng(self.params.seed)
        self._cols = np.sort(
            rng.choice(self.nbytes, min(self.nbytes, self.params.sketch_bytes), replace=False)
        )
        self._base: np.ndarray = np.empty((0, self.nbytes), dtype=np.uint8)
        """Rows 0..len-1, cell by cell: a read-only memory map of ``_base_path`` once saved."""
        self._base_path: Path | None = None
        self._cell_start = np.zeros(1, dtype=np.int64)
        self._tail = _Grow((self.nbytes,), np.uint8)
        self._ids = _Grow((), np.int64)
        self._alive = _Grow((), np.bool_)
        self._cells = _Grow((), np.int32)
        self._row_of: dict[int, int] = {}
        self._centroids = np.empty((0, self.nbytes), dtype=np.uint8)
        """The cells' full-spec centroids (a query's cells are the nearest of these)."""
        self._quantizer: Any = None  # FAISS flat index of the centroids' sketches, to assign specs
        self._lock = ReadWriteLock()
        self._compacting = threading.Lock()

    # -- sizes and ids ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._row_of)

    def ids(self) -> set[int]:
        with self._lock.read():
            return set(self._row_of)

    @property
    def trained(self) -> bool:
        return self._quantizer is not None

    @property
    def nlist(self) -> int:
        return 0 if self._quantizer is None else int(self._quantizer.ntotal)

    # -- input -----------------------------------------------------------------------------------

    def _packed(self, vectors: np.ndarray) -> np.ndarray:
        """Packed rows from ±1 vectors (N, d) or already packed bits (N, d/8) uint8."""
        arr = np.atleast_2d(np.asarray(vectors))
        if arr.dtype == np.uint8 and arr.shape[1] == self.nbytes:
            spare = self.nbytes * 8 - self.dim
            if spare and np.any(arr[:, -1] & ((1 << spare) - 1)):
                raise IncompatibleSpec(f"packed spec has bits set beyond its {self.dim} values")
            return np.ascontiguousarray(arr)
        if arr.shape[1] != self.dim:
            raise IncompatibleSpec(
                f"spec has {arr.shape[1]} values, index needs {self.dim} signs or {self.nbytes} packed bytes"
            )
        return np.ascontiguousarray(pack_signs(arr))

    # -- changes ---------------------------------------------------------------------------------

    def add(self, ids: list[int] | np.ndarray, vectors: np.ndarray, *, space_id: str | None = None) -> None:
        """Add (or replace) specs under ``ids``: an id is never indexed twice."""
        if space_id is not None and space_id != self.space_id:
            raise IncompatibleSpec(f"spec is of space {space_id}, index is of {self.space_id}")
        id_arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        codes = self._packed(vectors)
        if codes.shape[0] != id_arr.shape[0]:
            raise ValueError(f"{id_arr.shape[0]} ids for {codes.shape[0]} vectors")
        if len(set(id_arr.tolist())) != len(id_arr):
            raise ValueError("duplicate ids in one add")
        with self._lock.write():
            self._tombstone(id_arr)
            cells = self._assign(codes) if self._quantizer is not None else np.full(len(codes), -1, np.int32)
            first = len(self._base) + self._tail.n
            self._tail.append(codes)
            self._ids.append(id_arr)
            self._alive.append(np.ones(len(id_arr), dtype=np.bool_))
            self._cells.append(cells)
            self._row_of.update(zip(id_arr.tolist(), range(first, first + len(id_arr)), strict=True))

    def remove(self, ids: list[int] | np.ndarray) -> int:
        with self._lock.write():
            return self._tombstone(np.asarray(ids, dtype=np.int64).reshape(-1))

    def _tombstone(self, ids: np.ndarray) -> int:
        rows = [row for i in ids.tolist() if (row := self._row_of.pop(i, None)) is not None]
        self._alive.data[rows] = False
        return len(rows)

    def _assign(self, codes: np.ndarray, quantizer: Any = None) -> np.ndarray:
        """The cell of each packed spec: the nearest centroid by sketch."""
        quantizer = self._quantizer if quantizer is None else quantizer
        _, cell = quantizer.search(np.ascontiguousarray(codes[:, self._cols]), 1)
        return np.asarray(cell[:, 0], dtype=np.int32)

    # -- search ----------------------------------------------------------------------------------

    def _rows(self, ids: Iterable[int]) -> np.ndarray:
        return np.fromiter((r for i in ids if (r := self._row_of.get(int(i))) is not None), dtype=np.int64)

    def search(
        self,
        query: np.ndarray,
        k: int = 10,
        *,
        space_id: str | None = None,
        exclude: set[int] | None = None,
        allow: Iterable[int] | None = None,
        exact: bool = False,
        nprobe: int | None = None,
    ) -> list[Match]:
        """Top-``k`` ids by cosine with ``query``, best first. Only ids in ``allow`` (when given)
        and not in ``exclude`` take part: the filter is applied to the scored rows, so ``k``
        matches come back whenever ``k`` allowed specs exist in the probed cells. ``exact``
        scores every spec whatever the size (what recall is measured against); ``nprobe``
        overrides the parameters' cells per query."""
        if space_id is not None and space_id != self.space_id:
            raise IncompatibleSpec(f"query is of space {space_id}, index is of {self.space_id}")
        q = self._packed(query)
        if q.shape[0] != 1:
            raise IncompatibleSpec(f"one query spec at a time, got {q.shape[0]}")
        q = q[0]
        with self._lock.read():
            if not self._row_of or k <= 0:
                return []
            n_rows = len(self._base) + self._tail.n
            mask = self._alive.data[:n_rows]
            if exclude or allow is not None:
                mask = mask.copy()
                if exclude:
                    mask[self._rows(exclude)] = False
                if allow is not None:
                    allowed = np.zeros(n_rows, dtype=np.bool_)
                    allowed[self._rows(allow)] = True
                    mask &= allowed
            exhaustive = exact or self._quantizer is None or len(self) < self.params.exact_below
            rows, dist = self._score(q, exhaustive, nprobe or self.params.nprobe)
            keep = mask[rows]
            rows, dist = rows[keep], dist[keep]
            ids = self._ids.data[rows]
            if len(rows) > k:
                # The k nearest; ties at the k-th distance go to the smaller ids, as in exact order.
                kth = np.partition(dist, k - 1)[k - 1]
                inside = np.flatnonzero(dist < kth)
                tied = np.flatnonzero(dist == kth)
                tied = tied[np.argsort(ids[tied], kind="stable")[: k - len(inside)]]
                keep_rows = np.concatenate([inside, tied])
                ids, dist = ids[keep_rows], dist[keep_rows]
        order = np.lexsort((ids, dist))
        return [Match(int(ids[i]), float(1.0 - 2.0 * dist[i] / self.dim)) for i in order]

    def _score(self, q: np.ndarray, exhaustive: bool, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, Hamming distances) of the rows scored: all, or those of the probed cells."""
        n_base = len(self._base)
        tail = self._tail.view
        if exhaustive:
            rows = np.arange(n_base + len(tail), dtype=np.int64)
            return rows, np.concatenate([_hammings(self._base, q), _hammings(tail, q)])
        to_centroids = _hammings(self._centroids, q)
        cells = np.sort(np.argsort(to_centroids, kind="stable")[: min(nprobe, self.nlist)])
        row_parts, dist_parts = [], []
        for cell in cells.tolist():
            lo, hi = int(self._cell_start[cell]), int(self._cell_start[cell + 1])
            if hi > lo:
                row_parts.append(np.arange(lo, hi, dtype=np.int64))
                dist_parts.append(_hammings(self._base[lo:hi], q))
        if len(tail):
            in_probed = np.flatnonzero(np.isin(self._cells.data[n_base : n_base + len(tail)], cells))
            row_parts.append(n_base + in_probed)
            dist_parts.append(_hammings(np.ascontiguousarray(tail[in_probed]), q))
        if not row_parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        return np.concatenate(row_parts), np.concatenate(dist_parts)

    # -- building, compaction and files ------------------------------------------------------------

    def _train(self, codes: _RowSource, live_rows: np.ndarray) -> np.ndarray:
        """Full-spec centroids of the cells: binary k-means on the sketches of a sample of the
        live rows, then each centroid made the bitwise majority of its sampled members' full
        specs (a query picks its cells by the exact cosine to these, not by a noisy sketch)."""
        nlist = self.params.nlist(len(live_rows))
        rng = np.random.default_rng(self.params.seed)
        take = min(len(live_rows), nlist * self.params.train_per_cell)
        sample = np.sort(rng.choice(live_rows, take, replace=False))
        full = codes[sample]
        sketches = np.ascontiguousarray(full[:, self._cols])
        bits = len(self._cols) * 8
        ivf = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, nlist)
        ivf.cp.seed = self.params.seed
        ivf.train(sketches)
        _, member = ivf.quantizer.search(sketches, 1)
        member = member[:, 0]
        centroids = np.empty((nlist, self.nbytes), dtype=np.uint8)
        for cell in range(nlist):
            rows = full[member == cell]
            if not len(rows):  # an empty cell: a random sampled spec stands in
                rows = full[rng.integers(0, len(full), 1)]
            votes = np.unpackbits(rows, axis=1, count=self.dim).sum(axis=0, dtype=np.int32)
            centroids[cell] = np.packbits(2 * votes > len(rows), axis=-1)
        return centroids

    def _quantizer_of(self, centroids: np.ndarray) -> Any:
        """A FAISS flat index of the centroids' sketches (assigns a spec its cell)."""
        quantizer = faiss.IndexBinaryFlat(len(self._cols) * 8)
        quantizer.add(np.ascontiguousarray(centroids[:, self._cols]))
        return quantizer

    def _set_centroids(self, centroids: np.ndarray) -> None:
        self._centroids = np.ascontiguousarray(centroids)
        self._quantizer = self._quantizer_of(self._centroids)

    @classmethod
    def build(
        cls,
        space_id: str,
        dim: int,
        ids: np.ndarray,
        codes: np.ndarray,
        codes_path: Path | None,
        params: BinaryIndexParams | None = None,
    ) -> BinarySpecIndex:
        """An index of packed ``codes`` (N, d/8), which may be a memory map: trained and written
        cell by cell to ``codes_path`` chunk by chunk, never holding a second copy in memory."""
        index = cls(space_id, dim, params)
        ids = np.asarray(ids, dtype=np.int64)
        if codes.shape != (len(ids), index.nbytes) or len(set(ids.tolist())) != len(ids):
            raise ValueError(
                f"{len(ids)} distinct ids and codes of shape ({len(ids)}, {index.nbytes}) needed"
            )
        index._base = codes
        index._ids.append(ids)
        index._alive.append(np.ones(len(ids), dtype=np.bool_))
        index._cells.append(np.full(len(ids), -1, dtype=np.int32))
        index._row_of = dict(zip(ids.tolist(), range(len(ids)), strict=True))
        index.compact(codes_path)
        return index

    def needs_compaction(self) -> bool:
        n_file = max(1, len(self._base))
        dead = (len(self._base) + self._tail.n) - len(self._row_of)
        untrained_big = self._quantizer is None and len(self) >= self.params.exact_below
        return (
            untrained_big
            or self._tail.n > self.params.compact_tail * n_file
            or dead > self.params.compact_tail * n_file
        )

    def compact(self, codes_path: Path | None = None) -> None:
        """Rewrite the live specs cell by cell (to ``codes_path``, memory-mapped after, or in
        memory), training the cells first when there are enough specs and none yet or the size
        moved a lot since.

        Searches, adds and removes go on while this runs: it works on a snapshot of the rows
        (rows are only ever appended, and a row's codes never change), and takes the write lock
        only to install the new file, carrying over what changed meanwhile: specs added since
        join the new tail in their new cells, specs removed since stay tombstoned. One
        compaction runs at a time."""
        with self._compacting:
            with self._lock.read():
                n_rows = len(self._base) + self._tail.n
                live = np.flatnonzero(self._alive.data[:n_rows])
                source = _RowSource(self._base, self._tail.view)
                ids = self._ids.data[live].copy()
                centroids, quantizer = self._centroids, self._quantizer

            # The long part, under no lock: train, assign every live spec its cell, write.
            if len(live) >= self.params.exact_below and (
                quantizer is None
                or abs(self.params.nlist(len(live)) - int(quantizer.ntotal)) > quantizer.ntotal // 2
            ):
                centroids = self._train(source, live)
                quantizer = self._quantizer_of(centroids)
            if quantizer is not None:
                cells = np.empty(len(live), dtype=np.int32)
                for start in range(0, len(live), 20_000):
                    part = source[live[start : start + 20_000]]
                    cells[start : start + 20_000] = self._assign(part, quantizer)
                order = np.argsort(cells, kind="stable")
                live, cells, ids = live[order], cells[order], ids[order]
                cell_start = np.searchsorted(cells, np.arange(int(quantizer.ntotal) + 1)).astype(np.int64)
            else:
                cells = np.full(len(live), -1, dtype=np.int32)
                cell_start = np.zeros(1, dtype=np.int64)
            base = self._write_rows(source, live, codes_path)
            row_of = dict(zip(ids.tolist(), range(len(ids)), strict=True))

            with self._lock.write():
                # What changed while the file was written: rows appended after the snapshot,
                # and tombstones on the rows just written.
                now_rows = len(self._base) + self._tail.n
                still = self._alive.data[live]
                for dead in np.flatnonzero(~still).tolist():
                    row_of.pop(int(ids[dead]), None)
                late = np.arange(n_rows, now_rows)
                late = late[self._alive.data[late]]
                late_codes = np.ascontiguousarray(_RowSource(self._base, self._tail.view)[late])
                late_ids = self._ids.data[late].copy()
                late_cells = (
                    self._assign(late_codes, quantizer)
                    if quantizer is not None and len(late)
                    else np.full(len(late), -1, dtype=np.int32)
                )
                if quantizer is not self._quantizer:
                    self._centroids, self._quantizer = np.ascontiguousarray(centroids), quantizer
                self._base, self._base_path, self._cell_start = base, codes_path, cell_start
                self._tail = _Grow((self.nbytes,), np.uint8)
                self._ids, self._alive, self._cells = (
                    _Grow((), np.int64),
                    _Grow((), np.bool_),
                    _Grow((), np.int32),
                )
                self._ids.append(np.concatenate([ids, late_ids]))
                self._alive.append(np.concatenate([still, np.ones(len(late), dtype=np.bool_)]))
                self._cells.append(np.concatenate([cells, late_cells]))
                self._tail.append(late_codes)
                row_of.update(zip(late_ids.tolist(), range(len(ids), len(ids) + len(late)), strict=True))
                self._row_of = row_of

    def _write_rows(self, source: _RowSource, rows: np.ndarray, codes_path: Path | None) -> np.ndarray:
        """``source[rows]`` in that order, as a new codes file memory-mapped read-only (written
        chunk by chunk under a temporary name, then renamed) or, without a path, in memory."""
        if codes_path is None:
            return np.ascontiguousarray(source[rows]) if len(rows) else np.empty((0, self.nbytes), np.uint8)
        codes_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = codes_path.with_suffix(codes_path.suffix + ".tmp")
        if len(rows):
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(len(rows), self.nbytes))
            for start in range(0, len(rows), 20_000):
                out[start : start + 20_000] = source[rows[start : start + 20_000]]
            out.flush()
            del out
        else:
            with tmp.open("wb") as fh:  # np.save(path) would append ".npy" to the name
                np.save(fh, np.empty((0, self.nbytes), dtype=np.uint8))
        tmp.replace(codes_path)
        return np.load(codes_path, mmap_mode="r")

    def save(self, path: Path) -> None:
        """Write the index as ``path`` (a small manifest: ids, tombstones, cells, centroids, the
        tail's specs) beside its codes file (``<stem>.<token>.codes.npy``, the specs cell by
        cell). The codes file is rewritten only on compaction; the manifest atomically, so a
        reader never sees half of it. Codes files no manifest names are removed after a while."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._base_path is None or self._base_path.parent != path.parent or self.needs_compaction():
            self.compact(path.parent / f"{uuid.uuid4().hex}.codes.npy")
        with self._lock.read():
            assert self._base_path is not None
            n_rows = len(self._base) + self._tail.n
            header = {
                "format": "pave-binary-index/1",
                "space_id": self.space_id,
                "dim": self.dim,
                "codes": self._base_path.name,
                "rows_in_codes": len(self._base),
                "params": self.params.__dict__,
            }
            arrays: dict[str, np.ndarray] = {
                "header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                "cell_start": self._cell_start,
                "centroids": self._centroids,
                "ids": self._ids.data[:n_rows],
                "alive": self._alive.data[:n_rows],
                "cells": self._cells.data[:n_rows],
                "tail": self._tail.view,
            }
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as fh:
            np.savez(fh, allow_pickle=False, **arrays)
        tmp.replace(path)
        _collect_codes(path.parent)

    @classmethod
    def load(cls, path: Path, space_id: str, dim: int) -> BinarySpecIndex:
        """Open a saved index: the codes file memory-mapped read-only (shared by every process
        that opens it), the manifest read into memory."""
        path = Path(path)
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["header"]).decode())
            if header.get("format") != "pave-binary-index/1":
                raise IncompatibleSpec(f"index file {path} is not a binary spec index")
            if header["dim"] != dim or header["space_id"] != space_id:
                raise IncompatibleSpec(
                    f"index file {path} is of space {header['space_id']} (dim {header['dim']}), not {space_id}"
                )
            index = cls(space_id, dim, BinaryIndexParams(**header["params"]))
            codes_path = path.parent / header["codes"]
            base = np.load(codes_path, mmap_mode="r")
            if base.shape != (header["rows_in_codes"], index.nbytes):
                raise IncompatibleSpec(f"codes file {codes_path} has shape {base.shape}")
            index._base, index._base_path = base, codes_path
            index._cell_start = np.asarray(data["cell_start"], dtype=np.int64)
            centroids = np.asarray(data["centroids"])
            if len(centroids):
                index._set_centroids(centroids)
            ids, alive = np.asarray(data["ids"]), np.asarray(data["alive"])
            index._ids.append(ids)
            index._alive.append(alive)
            index._cells.append(np.asarray(data["cells"]))
            index._tail.append(np.asarray(data["tail"]))
        live = np.flatnonzero(alive)
        index._row_of = dict(zip(ids[live].tolist(), live.tolist(), strict=True))
        return index


class _RowSource:
    """Rows of the file followed by the tail's, indexable by sorted row numbers."""

    def __init__(self, base: np.ndarray, tail: np.ndarray):
        self.base, self.tail = base, tail

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        order = np.argsort(rows, kind="stable")  # read a memory map in file order
        ordered = rows[order]
        split = int(np.searchsorted(ordered, len(self.base)))
        got = np.concatenate(
            [np.asarray(self.base[ordered[:split]]), self.tail[ordered[split:] - len(self.base)]]
        )
        out = np.empty_like(got)
        out[order] = got
        return out


CODES_GRACE_S = 600.0
"""A codes file no manifest names is removed only this long after it was written: another
process may have just written it and not yet its manifest (an open memory map keeps a
removed file readable, so a process still searching an older one is not affected)."""


def _collect_codes(folder: Path) -> None:
    named: set[str] = set()
    for manifest in folder.glob("*.bits"):
        try:
            with np.load(manifest, allow_pickle=False) as data:
                named.add(json.loads(bytes(data["header"]).decode())["codes"])
        except (OSError, ValueError, KeyError):
            continue
    now = time.time()
    for codes in folder.glob("*.codes.npy"):
        if codes.name not in named and now - codes.stat().st_mtime > CODES_GRACE_S:
            codes.unlink(missing_ok=True)


SIGN_BITS = "sign-bits"
FLOAT32 = "float32"


def spec_encoding(steps: int, balanced: bool) -> str:
    """How a space's specs are stored: the one-gradient balanced recipe gives signs (packed bits);
    every other recipe continuous values (float32)."""
    return SIGN_BITS if steps == 0 and balanced else FLOAT32


def encoding_of_config(config: dict[str, Any]) -> str:
    """The encoding of a space from its stored config (``config_dict``; absent recipe fields
    take ``FitRecipe``'s defaults, steps=0 and balanced, which a test keeps in step)."""
    recipe = config.get("recipe") or {}
    return spec_encoding(int(recipe.get("steps", 0)), bool(recipe.get("balanced", True)))


def spec_to_bytes(vector: np.ndarray, encoding: str) -> bytes:
    """A spec as the database stores it: packed bits for a sign space, little-endian float32 else."""
    if encoding == SIGN_BITS:
        return pack_signs(np.asarray(vector).reshape(-1)).tobytes()
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def spec_from_bytes(blob: bytes, dim: int, *, packed: bool = False) -> np.ndarray:
    """A stored spec (either form, told apart by its length) as float32, or as packed bits when
    ``packed`` (a float32 spec of ±1 is packed here; any other float spec cannot be)."""
    if len(blob) == packed_len(dim):
        bits = np.frombuffer(blob, dtype=np.uint8)
        return bits if packed else unpack_signs(bits, dim)
    if len(blob) == 4 * dim:
        arr = np.frombuffer(blob, dtype="<f4")
        return pack_signs(arr) if packed else arr
    raise ValueError(
        f"stored spec has {len(blob)} bytes; space of dim {dim} needs {4 * dim} or {packed_len(dim)}"
    )
