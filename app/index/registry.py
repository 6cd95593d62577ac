"""One FAISS ``SpecIndex`` per spec space, kept in step with the database.

The database is the truth: a learnware enters its space's index when it becomes ready and
leaves it when deleted. Each such change bumps ``spec_spaces.index_version`` and stamps the
learnware's ``index_seq`` with the new version, in the same transaction. A process holding an
index compares its version with the database before it searches and applies only the rows
stamped since (``sync``), so API processes and workers see new learnwares without a restart.

Index files (``<index_dir>/<space>/<epoch>-v<version>.faiss``, or ``.bits`` for a space of
sign specs) are a cache: a process starts from the newest file of its database's epoch and
applies what changed since; without a file it rebuilds from the specs in the database.

A space's encoding picks its index: float32 specs a flat FAISS ``SpecIndex``; sign specs the
two-stage ``BinarySpecIndex`` (packed bits, cells, exact re-scoring), whose codes file is
memory-mapped, so the API processes of a host share one copy.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.db.models import Learnware, LearnwareStatus, Spec, SpecSpaceRecord
from app.db.session import Database
from app.errors import NotFound
from app.ml.binary_index import SIGN_BITS, BinarySpecIndex, encoding_of_config, spec_from_bytes
from app.ml.identify import Match, SpecIndex

log = logging.getLogger(__name__)

_FILE = re.compile(r"^(?P<epoch>[0-9a-f]+)-v(?P<version>\d+)\.(?P<kind>faiss|bits)$")
AnyIndex = SpecIndex | BinarySpecIndex
_BATCH = 1000
TIER_OVERFETCH = 4
"""Without label filters inside the search, a task with label names takes the top 4k."""


def bump_index_version(session: Session, space_id: str) -> int:
    """Reserve the next index version of a space (row-locked until the caller commits)."""
    session.execute(
        update(SpecSpaceRecord)
        .where(SpecSpaceRecord.id == space_id)
        .values(index_version=SpecSpaceRecord.index_version + 1)
        .execution_options(synchronize_session=False)
    )
    version = session.scalar(select(SpecSpaceRecord.index_version).where(SpecSpaceRecord.id == space_id))
    if version is None:
        raise NotFound(f"no spec space {space_id}")
    return int(version)


def vector_from_bytes(blob: bytes, dim: int) -> np.ndarray:
    """A stored spec as float32 (packed sign bits are unpacked to ±1)."""
    return spec_from_bytes(blob, dim)


def new_index(space_id: str, dim: int, encoding: str) -> AnyIndex:
    return BinarySpecIndex(space_id, dim) if encoding == SIGN_BITS else SpecIndex(space_id, dim)


def _suffix(encoding: str) -> str:
    return "bits" if encoding == SIGN_BITS else "faiss"


@dataclass
class IndexInfo:
    space_id: str
    size: int
    version: int
    source: str
    """Where the index came from at load: "file", "rebuilt" or "empty"."""


class LiveIndex:
    """A space's index in this process, with the database version it reflects."""

    def __init__(self, space_id: str, dim: int, epoch: str, encoding: str = "float32"):
        self.space_id = space_id
        self.dim = dim
        self.epoch = epoch
        self.encoding = encoding
        self.index: AnyIndex = new_index(space_id, dim, encoding)
        self.version = 0
        self.source = "empty"
        self.lock = threading.Lock()
        """Held while changes are applied or the index is replaced (not while it is searched)."""
        self.save_lock = threading.Lock()
        """One save of this index at a time."""
        self.saved_version = -1
        self.saved_at = 0.0
        self.rewrite: threading.Thread | None = None
        """The compaction running beside the requests, if any (at most one)."""


class IndexRegistry:
    """The indexes of this process, the embedded ``faiss`` vector engine (``app.index.engine``).
    ``persist``: write index files (API processes do)."""

    name = "faiss"

    def __init__(self, db: Database, index_dir: Path, *, persist: bool, save_interval_s: float = 10.0):
        self.db = db
        self.index_dir = Path(index_dir)
        self.persist = persist
        self.save_interval_s = save_interval_s
        self._live: dict[str, LiveIndex] = {}
        self._lock = threading.Lock()

    # -- loading ----------------------------------------------------------------------------

    def _space(self, session: Session, space_id: str) -> SpecSpaceRecord:
        record = session.get(SpecSpaceRecord, space_id)
        if record is None:
            raise NotFound(f"no spec space {space_id}")
        return record

    def _folder(self, space_id: str) -> Path:
        return self.index_dir / space_id

    def _files(self, space_id: str, epoch: str, kind: str) -> list[tuple[int, Path]]:
        folder = self._folder(space_id)
        if not folder.is_dir():
            return []
        found = []
        for path in folder.iterdir():
            m = _FILE.match(path.name)
            if m and m["epoch"] == epoch and m["kind"] == kind:
                found.append((int(m["version"]), path))
        return sorted(found)

    def live(self, space_id: str) -> LiveIndex:
        """This process's index of a space, loaded on first use and synced with the database."""
        with self._lock:
            live = self._live.get(space_id)
            if live is None:
                live = self._load(space_id)
                self._live[space_id] = live
        self.sync(live)
        return live

    def _load(self, space_id: str) -> LiveIndex:
        with self.db.session() as session:
            record = self._space(session, space_id)
            dim, epoch, db_version = record.dim, index_epoch(record), record.index_version
            encoding = encoding_of_config(record.config)
        live = LiveIndex(space_id, dim, epoch, encoding)
        for version, path in reversed(self._files(space_id, epoch, _suffix(encoding))):
            if version > db_version:
                continue
            try:
                live.index = (
                    BinarySpecIndex.load(path, space_id, dim)
                    if encoding == SIGN_BITS
                    else SpecIndex.load(path, space_id, dim)
                )
            except Exception as exc:  # a damaged cache file: fall back to the next, then the DB
                log.warning("index file %s unreadable (%s); trying older or rebuilding", path, exc)
                continue
            live.version, live.source, live.saved_version = version, "file", version
            log.info("index %s: %d specs from %s", space_id, len(live.index), path.name)
            return live
        if db_version > 0:
            self._rebuild_into(live)
            live.source = "rebuilt"
        return live

    # -- keeping in step ------------------------------------------------------------------------

    def sync(self, live: LiveIndex) -> bool:
        """Apply the learnwares stamped after this index's version; True if anything changed."""
        with self.db.session() as session:
            db_version = session.scalar(
                select(SpecSpaceRecord.index_version).where(SpecSpaceRecord.id == live.space_id)
            )
            if db_version is None or db_version == live.version:
                return False
            with live.lock:
                if db_version < live.version:
                    log.warning("index %s is ahead of the database (reset?); rebuilding", live.space_id)
                    self._rebuild_into(live, session)
                    live.source = "rebuilt"
                    changed = True
                else:
                    changed = self._apply_changes(session, live, live.version)
                live.version = max(live.version, int(db_version))
                index = live.index
        if isinstance(index, BinarySpecIndex) and not self.persist and index.needs_compaction():
            self._rewrite_beside(live, index.compact)  # no file: the cells are kept in memory
        if changed or live.saved_version < 0:
            self.maybe_save(live)
        return changed

    def _rewrite_beside(self, live: LiveIndex, work: Callable[[], object]) -> None:
        """Run ``work`` (a compaction, then a save) in a thread of its own, not in the request
        that found it due: searches and changes go on meanwhile (the index installs the new
        file under its write lock only at the end). At most one per index."""
        with self._lock:
            if live.rewrite is not None and live.rewrite.is_alive():
                return

            def run() -> None:
                try:
                    work()
                except Exception:  # the index stays as it was; the next change tries again
                    log.exception("index %s: compaction failed", live.space_id)

            live.rewrite = threading.Thread(target=run, name=f"index-rewrite-{live.space_id}", daemon=True)
            live.rewrite.start()

    def wait_for_rewrites(self, timeout_s: float | None = None) -> None:
        """Wait for the compactions running beside the requests (before a final save)."""
        for live in list(self._live.values()):
            if live.rewrite is not None:
                live.rewrite.join(timeout_s)

    def _apply_changes(self, session: Session, live: LiveIndex, since: int) -> bool:
        rows = session.execute(
            select(Learnware.id, Learnware.status, Learnware.private, Spec.vector)
            .outerjoin(Spec, Spec.id == Learnware.spec_id)
            .where(Learnware.space_id == live.space_id, Learnware.index_seq > since)
            .order_by(Learnware.id)
        ).all()
        add_ids: list[int] = []
        add_vecs: list[np.ndarray] = []
        remove_ids: list[int] = []
        for lw_id, status, private, blob in rows:
            if status == LearnwareStatus.ready and not private and blob is not None:
                add_ids.append(int(lw_id))
                add_vecs.append(self._decode(blob, live))
            else:
                remove_ids.append(int(lw_id))
        if remove_ids:
            live.index.remove(remove_ids)
        for start in range(0, len(add_ids), _BATCH):
            live.index.add(add_ids[start : start + _BATCH], np.stack(add_vecs[start : start + _BATCH]))
        return bool(rows)

    def _rebuild_into(self, live: LiveIndex, session: Session | None = None) -> None:
        if session is None:
            with self.db.session() as own:
                self._rebuild_into(live, own)
            return
        version = session.scalar(
            select(SpecSpaceRecord.index_version).where(SpecSpaceRecord.id == live.space_id)
        )
        fresh = new_index(live.space_id, live.dim, live.encoding)
        query = (
            select(Learnware.id, Spec.vector)
            .join(Spec, Spec.id == Learnware.spec_id)
            .where(
                Learnware.space_id == live.space_id,
                Learnware.status == LearnwareStatus.ready,
                Learnware.private.is_(False),
            )
            .order_by(Learnware.id)
            .execution_options(yield_per=_BATCH)
        )
        ids: list[int] = []
        vecs: list[np.ndarray] = []
        for lw_id, blob in session.execute(query):
            ids.append(int(lw_id))
            vecs.append(self._decode(blob, live))
            if len(ids) == _BATCH:
                fresh.add(ids, np.stack(vecs))
                ids, vecs = [], []
        if ids:
            fresh.add(ids, np.stack(vecs))
        if isinstance(fresh, BinarySpecIndex) and not self.persist:
            fresh.compact()  # in memory: a process that writes no file trains its cells here
        live.index = fresh
        live.version = int(version or 0)

    @staticmethod
    def _decode(blob: bytes, live: LiveIndex) -> np.ndarray:
        """A stored spec in the form its index takes: packed bits for a sign space."""
        return spec_from_bytes(blob, live.dim, packed=live.encoding == SIGN_BITS)

    def rebuild(self, space_id: str) -> IndexInfo:
        """Rebuild a space's index from the database and write its file."""
        with self._lock:
            live = self._live.get(space_id) or self._load(space_id)
            self._live[space_id] = live
        with live.lock:
            self._rebuild_into(live)
            live.source = "rebuilt"
        self.save(live)
        return self.info(live)

    # -- searching and saving ----------------------------------------------------------------

    def search(
        self,
        space_id: str,
        query: np.ndarray,
        k: int,
        *,
        label_names: Sequence[str] = (),
        exclude: set[int] | None = None,
    ) -> tuple[list[Match], int]:
        """Top-``k`` learnware ids by cosine and the index version searched; with a task's
        ``label_names`` the top ``TIER_OVERFETCH * k`` (the tiers are sorted by the caller)."""
        live = self.live(space_id)
        top = TIER_OVERFETCH * k if label_names else k
        return live.index.search(query, top, space_id=space_id, exclude=exclude), live.version

    def status(self, space_id: str) -> IndexInfo:
        return self.info(self.live(space_id))

    def publish(self, space_id: str) -> None:
        """Nothing to do: each process applies the stamped rows when it next searches."""

    def catch_up(self) -> None:
        """Nothing to do: each process's index syncs itself before it searches."""

    def close(self) -> None:
        self.wait_for_rewrites()
        if self.persist:
            self.save_all()

    def maybe_save(self, live: LiveIndex) -> None:
        """Save when the last save is old enough: the manifest in the request, a save that must
        rewrite the codes file beside it."""
        if not self.persist or time.monotonic() - live.saved_at < self.save_interval_s:
            return
        index = live.index
        if isinstance(index, BinarySpecIndex) and (index.needs_compaction() or not live.saved_at):
            self._rewrite_beside(live, lambda: self.save(live))
        else:
            self.save(live)

    def save(self, live: LiveIndex) -> Path | None:
        """Write this index as ``<epoch>-v<version>.faiss`` (atomically) and drop older files.
        The version is read before the index is written, so the file holds at least what its
        name says (a change applied meanwhile is applied again on load: adds replace by id)."""
        with live.save_lock:
            if live.saved_version == live.version and live.saved_at:
                return None
            with live.lock:
                index, version = live.index, live.version
            folder = self._folder(live.space_id)
            path = folder / f"{live.epoch}-v{version}.{_suffix(live.encoding)}"
            index.save(path)
            live.saved_version, live.saved_at = version, time.monotonic()
        for old_version, old in self._files(live.space_id, live.epoch, _suffix(live.encoding)):
            if old_version < version:
                old.unlink(missing_ok=True)
        for stray in folder.iterdir():
            m = _FILE.match(stray.name)
            if m and m["epoch"] != live.epoch:
                stray.unlink(missing_ok=True)
        return path

    def save_all(self) -> None:
        self.wait_for_rewrites()
        for live in list(self._live.values()):
            if live.saved_version != live.version:
                self.save(live)

    def info(self, live: LiveIndex) -> IndexInfo:
        return IndexInfo(live.space_id, len(live.index), live.version, live.source)

    def loaded_info(self, space_id: str) -> IndexInfo | None:
        live = self._live.get(space_id)
        return self.info(live) if live else None

    def loaded(self) -> Sequence[IndexInfo]:
        return [self.info(live) for live in self._live.values()]


def index_epoch(record: SpecSpaceRecord) -> str:
    """Index files belong to one database: the space row's creation time names that database."""
    return format(int(record.created_at.timestamp() * 1e6), "x")
