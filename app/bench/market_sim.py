"""A large market with real structure, for the scale benchmark.

Every simulated spec descends from a **real** task spec: the default space's base fitted
(``fit_pave_spec``, the space's own sign recipe) on few-shot draws of the shared text tasks.
Around those the market grows the way a model market does:

- **models** of a task: a real draw's spec with a fraction of its bits flipped, so two models
  of one task agree about as much as two real draws of it do (cosine ≈ 0.13), graded in
  quality (the flip fraction varies per model: a weaker model is further from its task);
- **near-duplicates**: re-uploads and light fine-tunes of a model (a few percent flipped);
- **mixtures**: merged models, the bitwise majority of two or three parents (of one task or of
  neighbouring ones).

Queries are real specs too: draws of each task that no market spec descends from. The check
that the market looks real (same task, same family, unrelated: mean and 99th percentile of the
cosine) is computed on the simulated specs and printed beside the real ones.

Specs are sign vectors, kept packed (``np.packbits``, 1 = +1): a million is 4.6 GB, not 147 GB.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.ml.binary_index import pack_signs

TASK_DRAWS = 3
"""Few-shot draws per task that the market grows from (seeds 0..2)."""
QUERY_DRAWS = 2
"""Further draws per task (seeds 3..4) used only as queries."""
SHOTS_PER_CLASS = 8


@dataclass(frozen=True)
class RealSpecs:
    """Packed real task specs: ``bits[i]`` is draw ``seeds[i]`` of task ``tasks[i]``."""

    space_id: str
    dim: int
    tasks: list[str]
    seeds: list[int]
    bits: np.ndarray

    def rows(self, *, market: bool) -> np.ndarray:
        """Indices of the market's parents (``market``) or of the held-out query draws."""
        seeds = np.asarray(self.seeds)
        return np.flatnonzero(seeds < TASK_DRAWS) if market else np.flatnonzero(seeds >= TASK_DRAWS)


def real_specs(
    datasets_dir: Path, cache_dir: Path, *, tasks: list[str] | None = None, say: Callable[[str], None] = print
) -> RealSpecs:
    """Fit (or read from ``cache_dir``) the real task specs the market grows from."""
    from app.ml.data import few_shot, load_task, text_task_names
    from app.ml.pave import fit_pave_spec
    from app.ml.spec_space import load_space

    space = load_space()
    names = tasks or text_task_names(datasets_dir)
    key = hashlib.sha256(json.dumps([space.id, names, TASK_DRAWS, QUERY_DRAWS]).encode()).hexdigest()[:12]
    path = Path(cache_dir) / f"real-specs-{key}.npz"
    if path.is_file():
        data = np.load(path)
        return RealSpecs(
            str(data["space_id"]), int(data["dim"]), list(data["tasks"]), list(data["seeds"]), data["bits"]
        )
    packed: list[np.ndarray] = []
    row_tasks: list[str] = []
    row_seeds: list[int] = []
    for name in names:
        task = load_task(datasets_dir, name, "train")
        for seed in range(TASK_DRAWS + QUERY_DRAWS):
            shots = few_shot(task, per_class=SHOTS_PER_CLASS, seed=seed)
            spec = fit_pave_spec(space, shots.texts, shots.labels, shots.label_names, kind="task")
            packed.append(pack_signs(spec.vector))
            row_tasks.append(name)
            row_seeds.append(seed)
        say(f"  real specs: {name} ({len(packed)} so far)")
    bits = np.stack(packed)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, space_id=space.id, dim=space.dim, tasks=row_tasks, seeds=row_seeds, bits=bits)
    return RealSpecs(space.id, space.dim, row_tasks, row_seeds, bits)


MODEL_FLIP = (0.25, 0.40)
"""Flip fraction of a model from its task draw, uniform in this range (its quality grade):
cosine 0.2–0.5 to the draw, about 0.12 between two models of one draw, as between real draws."""
DUPLICATE_FLIP = (0.005, 0.05)
"""Flip fraction of a near-duplicate (re-upload, light fine-tune) from its model."""
SHARES = {"model": 0.6, "duplicate": 0.3, "mixture": 0.1}
_POOL = 64
_BUCKETS = 16
_CHUNK = 20_000


@dataclass
class Market:
    """Kinds and lineage of the simulated specs (the packed specs themselves go to a file)."""

    size: int
    kind: np.ndarray
    """0 model, 1 near-duplicate, 2 mixture."""
    parent: np.ndarray
    """Row in ``RealSpecs`` a model descends from (a duplicate: its model's; a mixture: its first)."""
    source: np.ndarray
    """A duplicate's model (a market row), a mixture's first model, -1 for a model."""


def _flip_pool(rng: np.random.Generator, nbytes: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Packed Bernoulli(f) masks, ``_POOL`` per flip-rate bucket between ``lo`` and ``hi``. A
    child's mask is one of them rotated by a random byte offset: still i.i.d. Bernoulli(f)
    bits, and independent of another child's (a rotation of an i.i.d. sequence against another)."""
    rates = np.linspace(lo, hi, _BUCKETS)
    masks = np.empty((_BUCKETS, _POOL, nbytes), dtype=np.uint8)
    for b, rate in enumerate(rates):
        masks[b] = np.packbits(rng.random((_POOL, nbytes * 8)) < rate, axis=-1)
    return rates, masks


def _masks(rng: np.random.Generator, pool: np.ndarray, n: int) -> np.ndarray:
    nbytes = pool.shape[-1]
    bucket = rng.integers(0, pool.shape[0], n)
    which = rng.integers(0, pool.shape[1], n)
    shift = rng.integers(0, nbytes, n)
    # Every rotation of a mask is a window of the mask written twice: gather windows, not bytes.
    windows = np.lib.stride_tricks.sliding_window_view(np.concatenate([pool, pool], axis=-1), nbytes, axis=-1)
    return np.ascontiguousarray(windows[bucket, which, shift])


def generate_market(
    real: RealSpecs, size: int, out: np.ndarray, *, seed: int = 0, say: Callable[[str], None] = print
) -> Market:
    """Fill ``out`` (size, nbytes) uint8 (a memmap for large markets) with a simulated market."""
    rng = np.random.default_rng(seed)
    parents = real.rows(market=True)
    nbytes = real.bits.shape[1]
    kind = rng.choice(3, size=size, p=[SHARES["model"], SHARES["duplicate"], SHARES["mixture"]]).astype(
        np.int8
    )
    kind[: max(1, size // 100)] = 0  # the first rows are models, so every later kind has sources
    parent = np.full(size, -1, dtype=np.int32)
    source = np.full(size, -1, dtype=np.int64)
    _, model_pool = _flip_pool(rng, nbytes, *MODEL_FLIP)
    _, dup_pool = _flip_pool(rng, nbytes, *DUPLICATE_FLIP)
    for start in range(0, size, _CHUNK):
        stop = min(size, start + _CHUNK)
        k = kind[start:stop]
        block = np.empty((stop - start, nbytes), dtype=np.uint8)
        models = np.flatnonzero(k == 0)
        if len(models):
            p = parents[rng.integers(0, len(parents), len(models))]
            parent[start + models] = p
            block[models] = real.bits[p] ^ _masks(rng, model_pool, len(models))
        # Sources are models of earlier chunks (in the first chunk: its own models, written first).
        earlier = np.flatnonzero(kind[:start] == 0) if start else start + models
        if start == 0:
            out[start:stop][models] = block[models]
        dups = np.flatnonzero(k == 1)
        if len(dups):
            src = earlier[rng.integers(0, len(earlier), len(dups))]
            source[start + dups] = src
            parent[start + dups] = parent[src]
            block[dups] = _rows(out, src) ^ _masks(rng, dup_pool, len(dups))
        mixes = np.flatnonzero(k == 2)
        if len(mixes):
            a, b, c = (earlier[rng.integers(0, len(earlier), len(mixes))] for _ in range(3))
            source[start + mixes] = a
            parent[start + mixes] = parent[a]
            xa, xb, xc = (_rows(out, r) for r in (a, b, c))
            three = rng.random(len(mixes)) < 0.5
            noise = rng.integers(0, 256, (len(mixes), nbytes), dtype=np.uint8)
            # Bitwise majority of three parents; of two, their agreement and a coin where they differ.
            block[mixes] = np.where(
                three[:, None], (xa & xb) | (xa & xc) | (xb & xc), (xa & xb) | ((xa ^ xb) & noise)
            )
        out[start:stop] = block
        if stop % 200_000 < _CHUNK or stop == size:
            say(f"  market: {stop:,} of {size:,} specs")
    return Market(size, kind, parent, source)


def _rows(store: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``store[rows]`` read in row order (a memmap reads sequentially), returned in ``rows``' order."""
    order = np.argsort(rows, kind="stable")
    got = np.asarray(store[rows[order]])
    back = np.empty_like(got)
    back[order] = got
    return back
