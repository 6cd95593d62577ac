"""The two-stage index of packed sign specs: exactness, recall against exact search on
structured specs, changes by id, filters, files, concurrency and bad input."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from app.ml import binary_index
from app.ml.binary_index import (
    BinaryIndexParams,
    BinarySpecIndex,
    cosine_from_hamming,
    encoding_of_config,
    hamming,
    pack_signs,
    spec_from_bytes,
    spec_to_bytes,
    unpack_signs,
)
from app.ml.errors import IncompatibleSpec
from app.ml.spec_space import FitRecipe, SpecSpaceConfig, config_dict

DIM = 4096


def signs(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    return np.where(rng.random((n, dim)) < 0.5, -1.0, 1.0).astype(np.float32)


def flipped(rng: np.random.Generator, parents: np.ndarray, rate: np.ndarray | float) -> np.ndarray:
    rate = np.broadcast_to(np.asarray(rate, dtype=np.float64).reshape(-1, 1), (len(parents), 1))
    return np.where(rng.random(parents.shape) < rate, -parents, parents).astype(np.float32)


def market(seed: int = 0, n: int = 6000, families: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Families of models around task centres (graded quality: 25–40% of signs flipped, so two
    models of one family agree at cosine ≈ 0.12, as real task specs do), plus queries: further
    draws of the centres."""
    rng = np.random.default_rng(seed)
    centres = signs(rng, families)
    family = rng.integers(0, families, n)
    specs = flipped(rng, centres[family], rng.uniform(0.25, 0.40, n))
    queries = flipped(rng, centres[rng.integers(0, families, 40)], 0.3)
    return specs, queries


def brute_force(specs: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    cos = specs @ query / DIM
    return [int(i) for i in np.lexsort((np.arange(len(specs)), -cos))[:k]]


def hold_compaction_writes(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Hold every compaction at the point it writes its codes file: the first event is set once
    one is there, and it goes on once the second is set."""
    writing, release = threading.Event(), threading.Event()
    write_rows = BinarySpecIndex._write_rows

    def held(self: BinarySpecIndex, *args: object) -> np.ndarray:
        writing.set()
        assert release.wait(30)
        return write_rows(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(BinarySpecIndex, "_write_rows", held)
    return writing, release


def test_packed_signs_give_the_cosine_exactly() -> None:
    rng = np.random.default_rng(1)
    a, b = signs(rng, 2, 1001)  # a dimension that is not a multiple of 8
    bits_a, bits_b = pack_signs(a), pack_signs(b)
    assert bits_a.shape == (126,) and np.array_equal(unpack_signs(bits_a, 1001), a)
    assert float(cosine_from_hamming(hamming(bits_a, bits_b), 1001)) == pytest.approx(
        float(a @ b) / 1001, abs=1e-12
    )
    with pytest.raises(IncompatibleSpec, match=r"\+1 and -1"):
        pack_signs(np.array([1.0, 0.5, -1.0]))


def test_stored_specs_keep_either_form() -> None:
    rng = np.random.default_rng(2)
    vector = signs(rng, 1)[0]
    packed = spec_to_bytes(vector, "sign-bits")
    assert len(packed) == DIM // 8
    assert np.array_equal(spec_from_bytes(packed, DIM), vector)
    as_float = spec_to_bytes(vector, "float32")
    assert np.array_equal(spec_from_bytes(as_float, DIM, packed=True), pack_signs(vector))
    with pytest.raises(ValueError, match="needs"):
        spec_from_bytes(b"\x00" * 10, DIM)


def test_the_encoding_follows_the_recipe() -> None:
    assert encoding_of_config(config_dict(SpecSpaceConfig())) == "sign-bits"
    assert encoding_of_config({}) == "sign-bits"  # FitRecipe's defaults, kept in step
    assert FitRecipe().steps == 0 and FitRecipe().balanced
    assert encoding_of_config(config_dict(SpecSpaceConfig().with_recipe(steps=20))) == "float32"
    assert encoding_of_config(config_dict(SpecSpaceConfig().with_recipe(balanced=False))) == "float32"


def test_below_the_threshold_search_is_exact() -> None:
    specs, queries = market(n=800)
    index = BinarySpecIndex("s", DIM)  # exact_below 20,000
    index.add(np.arange(len(specs)), specs)
    for query in queries[:5]:
        found = index.search(query, 10)
        assert [m.id for m in found] == brute_force(specs, query, 10)
        assert found[0].score == pytest.approx(float(specs[found[0].id] @ query) / DIM)


def test_two_stage_recall_against_exact_on_structured_specs() -> None:
    specs, queries = market()
    params = BinaryIndexParams(exact_below=1000, rows_per_cell=200, nprobe=8, sketch_bytes=128)
    index = BinarySpecIndex("s", DIM, params)
    index.add(np.arange(len(specs)), specs)
    index.compact()
    assert index.trained and index.nlist == 30
    recall = []
    for query in queries:
        exact = index.search(query, 10, exact=True)
        assert [m.id for m in exact] == brute_force(specs, query, 10)
        approx = index.search(query, 10)
        recall.append(len({m.id for m in approx} & {m.id for m in exact}) / 10)
        # The second stage is exact: every score returned is the spec's true cosine.
        for m in approx:
            assert m.score == pytest.approx(float(specs[m.id] @ query) / DIM)
    assert np.mean(recall) >= 0.95
    # Probing fewer cells scans less and finds less: the first stage really prunes.
    few = [
        len({m.id for m in index.search(q, 10, nprobe=1)} & set(brute_force(specs, q, 10))) / 10
        for q in queries
    ]
    assert np.mean(few) < np.mean(recall)


def test_add_replace_remove_by_id_and_the_tail_after_compaction() -> None:
    specs, queries = market(n=3000)
    params = BinaryIndexParams(exact_below=1000, rows_per_cell=200, nprobe=30, sketch_bytes=128)
    index = BinarySpecIndex("s", DIM, params)
    index.add(np.arange(3000) + 100, specs)
    index.compact()
    target = queries[0]
    assert index.search(target, 1)[0].score < 0.9
    index.add([7], target)  # a new id lands in the tail, in its cell
    assert index.search(target, 1)[0].id == 7 and len(index) == 3001
    index.add([7], -target)  # replaced, never indexed twice
    assert index.search(target, 1)[0].id != 7 and index.search(-target, 1)[0].id == 7
    assert len(index) == 3001 and 7 in index.ids()
    assert index.remove([7, 100, 99999]) == 2
    assert 7 not in index.ids() and 100 not in index.ids() and len(index) == 2999
    assert all(m.id not in (7, 100) for m in index.search(-target, 50))


def test_filters_apply_inside_the_search() -> None:
    specs, queries = market(n=3000)
    params = BinaryIndexParams(exact_below=1000, rows_per_cell=200, nprobe=30, sketch_bytes=128)
    index = BinarySpecIndex("s", DIM, params)
    index.add(np.arange(3000), specs)
    index.compact()
    allowed = set(range(0, 3000, 7))
    found = index.search(queries[0], 10, allow=allowed)
    # k matches come back, all allowed, and they are the best allowed ones (not the best
    # overall with the others dropped afterwards).
    assert len(found) == 10 and {m.id for m in found} <= allowed
    best_allowed = [i for i in brute_force(specs, queries[0], 3000) if i in allowed][:10]
    assert [m.id for m in found] == best_allowed
    top = index.search(queries[0], 3)
    assert top[0].id not in {m.id for m in index.search(queries[0], 3, exclude={top[0].id})}


def test_save_load_keeps_the_codes_file_until_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs, queries = market(n=3000)
    params = BinaryIndexParams(
        exact_below=1000, rows_per_cell=200, nprobe=8, sketch_bytes=128, compact_tail=0.1
    )
    index = BinarySpecIndex("s", DIM, params)
    index.add(np.arange(3000), specs)
    index.save(tmp_path / "e-v1.bits")
    codes = sorted(tmp_path.glob("*.codes.npy"))
    assert len(codes) == 1 and index.trained
    loaded = BinarySpecIndex.load(tmp_path / "e-v1.bits", "s", DIM)
    assert isinstance(loaded._base, np.memmap)  # shared through the page cache, not copied
    for query in queries[:10]:
        assert loaded.search(query, 10) == index.search(query, 10)
    # A few changes: only the small manifest is written again.
    loaded.add([5000], queries[0])
    loaded.remove([1])
    loaded.save(tmp_path / "e-v2.bits")
    assert sorted(tmp_path.glob("*.codes.npy")) == codes
    again = BinarySpecIndex.load(tmp_path / "e-v2.bits", "s", DIM)
    assert again.search(queries[0], 1)[0].id == 5000 and 1 not in again.ids() and len(again) == 3000
    # Many changes: compaction writes a new codes file; the old one goes once unreferenced
    # and past its grace period (another process may still be about to name it).
    again.add(np.arange(6000, 6400), specs[:400])
    monkeypatch.setattr(binary_index, "CODES_GRACE_S", 0.0)
    (tmp_path / "e-v1.bits").unlink()
    (tmp_path / "e-v2.bits").unlink()
    again.save(tmp_path / "e-v3.bits")
    now = sorted(tmp_path.glob("*.codes.npy"))
    assert len(now) == 1 and now != codes and len(again._tail.view) == 0
    assert BinarySpecIndex.load(tmp_path / "e-v3.bits", "s", DIM).ids() == again.ids()


def test_a_query_before_anything_is_indexed_finds_nothing(tmp_path: Path) -> None:
    index = BinarySpecIndex("s", DIM)
    query = signs(np.random.default_rng(3), 1)[0]
    assert index.search(query, 10) == []
    index.save(tmp_path / "e-v0.bits")
    assert BinarySpecIndex.load(tmp_path / "e-v0.bits", "s", DIM).search(query, 10) == []


def test_bad_specs_are_refused_with_the_reason(tmp_path: Path) -> None:
    index = BinarySpecIndex("s", DIM)
    rng = np.random.default_rng(4)
    with pytest.raises(IncompatibleSpec, match=r"\+1 and -1"):
        index.add([1], rng.standard_normal(DIM))
    with pytest.raises(IncompatibleSpec, match="4096 signs or 512 packed bytes"):
        index.add([1], signs(rng, 1, 100))
    with pytest.raises(IncompatibleSpec, match="space other"):
        index.search(signs(rng, 1)[0], 3, space_id="other")
    odd = BinarySpecIndex("s", 1001)
    with pytest.raises(IncompatibleSpec, match="beyond its 1001"):
        odd.add([1], np.full(126, 255, dtype=np.uint8))
    index.add([1], signs(rng, 1)[0])
    index.save(tmp_path / "e-v1.bits")
    with pytest.raises(IncompatibleSpec, match="space s"):
        BinarySpecIndex.load(tmp_path / "e-v1.bits", "s", 2048)


def test_searches_run_alongside_changes() -> None:
    specs, queries = market(n=3000)
    params = BinaryIndexParams(exact_below=1000, rows_per_cell=200, nprobe=8, sketch_bytes=128)
    index = BinarySpecIndex("s", DIM, params)
    index.add(np.arange(3000), specs)
    index.compact()
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                assert len(index.search(queries[1], 10)) == 10
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for i in range(200):
        index.add([10_000 + i], specs[i])
        index.remove([i])
    time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors and len(index) == 3000


def test_compaction_runs_beside_searches_and_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a compaction writes its file (held here mid-write), searches answer and specs are
    added, replaced and removed; once it installs the file, every change made meanwhile is
    there, and no id is indexed twice."""
    specs, queries = market(n=3000)
    params = BinaryIndexParams(exact_below=1000, rows_per_cell=200, nprobe=30, sketch_bytes=128)
    index = BinarySpecIndex("s", DIM, params)
    index.add(np.arange(3000), specs[:3000])
    index.compact()
    index.add(np.arange(3000, 3400), flipped(np.random.default_rng(9), specs[:400], 0.3))  # a tail to fold in

    writing, release = hold_compaction_writes(monkeypatch)
    compaction = threading.Thread(target=index.compact, args=(tmp_path / "new.codes.npy",))
    compaction.start()
    assert writing.wait(30)
    before = time.monotonic()
    assert len(index.search(queries[0], 10)) == 10
    index.add([7000], queries[0])  # new: lands in the tail
    index.add([5], -queries[1])  # replaced: its snapshot row must die, the new one live
    index.add([3001], queries[2])  # a tail row of the snapshot, replaced too
    index.remove([6, 3002])  # removed from the file's rows and from the tail's
    index.add([7001], queries[3])
    index.remove([7001])  # added and removed meanwhile
    assert time.monotonic() - before < 5  # nothing waited for the compaction
    assert compaction.is_alive()
    release.set()
    compaction.join(30)

    assert index._base_path == tmp_path / "new.codes.npy"
    assert len(index) == 3400 + 1 - 2
    ids = index._ids.data[np.flatnonzero(index._alive.data[: len(index._base) + index._tail.n])]
    assert len(ids) == len(set(ids.tolist())) == len(index)  # no id twice
    assert index.ids() == (set(range(3400)) - {6, 3002}) | {7000}
    assert index.search(queries[0], 1)[0].id == 7000
    assert index.search(-queries[1], 1)[0].id == 5
    assert index.search(queries[2], 1)[0].id == 3001
    found = {m.id for m in index.search(queries[3], 50)}
    assert 7001 not in found and 6 not in found
    # The late rows sit in the tail, in cells of the new file's quantizer: found by the
    # two-stage search exactly as by an exact scan.
    for query in queries[:10]:
        assert index.search(query, 10, nprobe=params.nlist(3400)) == index.search(query, 10, exact=True)
