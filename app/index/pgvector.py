"""The ``pgvector`` vector engine: one PostgreSQL server with the pgvector extension (0.7 or newer)
that every API process and worker of the market shares.

Each spec space is a table of its own in the engine (``pavedock_specs_<hash of the space>``), one
row per learnware: its spec, whether it is ready and public, and its normalised label names. A
sign space keeps its specs as ``bit(d)``, searched by their Hamming distance (``<~>``), which gives
the cosine exactly (cos = 1 − 2·hamming/d); a float space keeps ``vector(d)`` (cosine ``<=>``,
at most 16,000 dimensions, pgvector's limit). An HNSW (or IVFFlat) index proposes candidates in
order; the distance it orders by is the exact one of the full spec, and with iterative index
scans the filters (ready, public, what the labels can answer) are applied inside the index scan,
so a filter never leaves fewer than ``k`` results where ``k`` exist.

The dock's database stays the truth. ``pavedock_spaces`` in the engine records, per space, the
database's index version it reflects; bringing it up to date (``_sync``) applies the learnwares
stamped since, upserting by learnware id, and moves the version, in one engine transaction that
holds the space's row lock: two processes syncing at once apply the rows once, a sync cut short
is rolled back whole, and a learnware is never in the engine twice. While the engine is down
nothing is lost, the stamps wait in the database; the first sync after it is back (a search,
the worker that fitted the spec, or the reaper's periodic ``catch_up``) applies them.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import psycopg2
import psycopg2.extensions
import psycopg2.extras
from sqlalchemy import select

from app.db.models import Learnware, LearnwareStatus, Spec, SpecSpaceRecord
from app.db.session import Database
from app.errors import NotFound, VectorEngineUnavailable
from app.index.registry import IndexInfo, index_epoch
from app.ml.binary_index import SIGN_BITS, encoding_of_config, packed_len, spec_from_bytes
from app.ml.errors import IncompatibleSpec
from app.ml.identify import Match
from app.ml.label_maps import label_set

log = logging.getLogger(__name__)

VECTOR_MAX_DIM = 16_000
"""pgvector's ``vector`` type holds at most this many dimensions."""
HNSW_MAX_DIM = {SIGN_BITS: 64_000, "float32": 2_000}
"""pgvector's HNSW and IVFFlat indexes take ``bit`` up to 64,000 and ``vector`` up to 2,000."""
_BATCH = 500
_SCHEMA_LOCK = 7_340_412  # pg_advisory_xact_lock key: one process creates tables at a time


def _libpq_dsn(url: str) -> str:
    """A libpq URL from a SQLAlchemy one (``postgresql+psycopg2://`` → ``postgresql://``)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise ValueError(f"PAVEDOCK_VECTOR_ENGINE_URL must be a postgresql:// URL, got {scheme}://")
    return f"postgresql://{rest}"


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}"


def _table(space_id: str) -> str:
    return "pavedock_specs_" + hashlib.sha256(space_id.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class EngineSpace:
    space_id: str
    dim: int
    encoding: str
    epoch: str
    db_version: int

    @property
    def table(self) -> str:
        return _table(self.space_id)

    @property
    def column_type(self) -> str:
        return f"bit({self.dim})" if self.encoding == SIGN_BITS else f"vector({self.dim})"

    @property
    def operator(self) -> str:
        return "<~>" if self.encoding == SIGN_BITS else "<=>"

    @property
    def opclass(self) -> str:
        return "bit_hamming_ops" if self.encoding == SIGN_BITS else "vector_cosine_ops"

    def literal(self, vector: np.ndarray) -> str:
        """A spec as the engine's SQL takes it: hex of the packed bits, or pgvector's text form."""
        if self.encoding == SIGN_BITS:
            return bytes(np.asarray(vector, dtype=np.uint8)).hex()
        return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32)) + "]"

    @property
    def placeholder(self) -> str:
        """The SQL of a spec parameter (``('x' || hex)::bit(d)`` takes the packed bytes)."""
        return f"('x' || %s)::{self.column_type}" if self.encoding == SIGN_BITS else f"%s::{self.column_type}"

    def cosine(self, distance: float) -> float:
        if self.encoding == SIGN_BITS:
            return 1.0 - 2.0 * float(distance) / self.dim
        return 1.0 - float(distance)


class PgVectorEngine:
    """Specs searched in a shared PostgreSQL + pgvector server (``app.index.engine.VectorEngine``)."""

    name = "pgvector"

    def __init__(
        self,
        db: Database,
        url: str,
        *,
        index: str = "hnsw",
        ef_search: int = 1000,
        timeout_s: float = 5.0,
    ):
        if index not in ("hnsw", "ivfflat", "exact"):
            raise ValueError(f"vector engine index must be hnsw, ivfflat or exact, not {index!r}")
        self.db = db
        self.dsn = _libpq_dsn(url)
        self.where = _where(self.dsn)
        self.index_kind = index
        self.ef_search = ef_search
        self.timeout_s = timeout_s
        self._idle: list[psycopg2.extensions.connection] = []
        self._idle_lock = threading.Lock()
        self._ready_tables: set[str] = set()
        self._seen: dict[str, IndexInfo] = {}

    # -- connections ------------------------------------------------------------------------------

    def _connect(self) -> psycopg2.extensions.connection:
        return psycopg2.connect(
            self.dsn,
            connect_timeout=max(1, math.ceil(self.timeout_s)),
            options=f"-c statement_timeout={int(self.timeout_s * 1000)}",
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
            application_name="pavedock",
        )

    def _checkout(self) -> psycopg2.extensions.connection | None:
        """An idle connection that still answers (one the server dropped, say across its restart,
        is closed here rather than failing the caller's statement), or None."""
        while True:
            with self._idle_lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return None
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
                conn.rollback()
                return conn
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor in one engine transaction (committed on success); an engine that cannot be
        reached raises ``VectorEngineUnavailable`` with the reason, and its connection is dropped."""
        conn = self._checkout()
        try:
            if conn is None:
                conn = self._connect()
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
            if conn is not None:
                conn.close()
            self.close()  # the idle connections were to the same server: likely dead too
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise VectorEngineUnavailable(
                f"vector engine pgvector at {self.where} is unavailable: {reason}"
            ) from exc
        except BaseException:
            if conn is not None:
                if conn.closed:
                    raise
                conn.rollback()
            raise
        else:
            with self._idle_lock:
                if len(self._idle) < 8:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    # -- the database's side ----------------------------------------------------------------------

    def _space(self, space_id: str) -> EngineSpace:
        with self.db.session() as session:
            record = session.get(SpecSpaceRecord, space_id)
            if record is None:
                raise NotFound(f"no spec space {space_id}")
            return EngineSpace(
                space_id,
                record.dim,
                encoding_of_config(record.config),
                index_epoch(record),
                int(record.index_version),
            )

    def _db_version(self, space_id: str) -> int:
        with self.db.session() as session:
            version = session.scalar(
                select(SpecSpaceRecord.index_version).where(SpecSpaceRecord.id == space_id)
            )
        if version is None:
            raise NotFound(f"no spec space {space_id}")
        return int(version)

    def _rows(self, space: EngineSpace, since: int | None) -> Iterator[list[tuple[Any, ...]]]:
        """The engine's rows of the learnwares stamped after ``since`` (all indexable ones when
        None), in batches: (id, ready, public, labels, n_classes, spec literal or None)."""
        query = (
            select(Learnware.id, Learnware.status, Learnware.private, Learnware.label_names, Spec.vector)
            .outerjoin(Spec, Spec.id == Learnware.spec_id)
            .where(Learnware.space_id == space.space_id)
            .order_by(Learnware.id)
            .execution_options(yield_per=_BATCH)
        )
        if since is None:
            query = query.where(
                Learnware.status == LearnwareStatus.ready, Learnware.private.is_(False), Spec.id.is_not(None)
            )
        else:
            query = query.where(Learnware.index_seq > since)
        packed = space.encoding == SIGN_BITS
        with self.db.session() as session:
            batch: list[tuple[Any, ...]] = []
            for lw_id, status, private, names, blob in session.execute(query):
                labels = sorted(label_set(names or []))
                literal = (
                    None if blob is None else space.literal(spec_from_bytes(blob, space.dim, packed=packed))
                )
                ready = status == LearnwareStatus.ready
                batch.append((int(lw_id), ready, not private, labels, len(labels), literal))
                if len(batch) == _BATCH:
                    yield batch
                    batch = []
            if batch:
                yield batch

    # -- the engine's side ------------------------------------------------------------------------

    def _ensure(self, cur: Any, space: EngineSpace) -> None:
        """The extension, the state table and the space's table with its indexes."""
        if space.table in self._ready_tables:
            return
        if space.encoding != SIGN_BITS and space.dim > VECTOR_MAX_DIM:
            raise IncompatibleSpec(
                f"space {space.space_id} holds float specs of {space.dim} dimensions; pgvector's vector "
                f"type holds at most {VECTOR_MAX_DIM}: use the faiss engine or a sign-spec recipe"
            )
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
        cur.execute(
            "CREATE TABLE IF NOT EXISTS pavedock_spaces (space_id text PRIMARY KEY, spec_table text NOT NULL,"
            " dim integer NOT NULL, encoding text NOT NULL, epoch text NOT NULL, version bigint NOT NULL)"
        )
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {space.table} (learnware_id bigint PRIMARY KEY,"
            " ready boolean NOT NULL, public boolean NOT NULL, labels text[] NOT NULL,"
            f" n_classes integer NOT NULL, spec {space.column_type} NOT NULL)"
        )
        cur.execute(f"CREATE INDEX IF NOT EXISTS {space.table}_labels ON {space.table} USING gin (labels)")
        self._create_spec_index(cur, space)
        cur.execute(
            "INSERT INTO pavedock_spaces VALUES (%s, %s, %s, %s, %s, 0) ON CONFLICT (space_id) DO NOTHING",
            (space.space_id, space.table, space.dim, space.encoding, space.epoch),
        )
        self._ready_tables.add(space.table)

    def _create_spec_index(self, cur: Any, space: EngineSpace) -> None:
        if self.index_kind == "exact" or space.dim > HNSW_MAX_DIM[space.encoding]:
            return
        using = "hnsw" if self.index_kind == "hnsw" else "ivfflat"
        params = ""
        if using == "ivfflat":  # its lists are trained on the rows there now: rebuild after a load
            cur.execute(f"SELECT count(*) FROM {space.table} WHERE ready AND public")
            params = f" WITH (lists = {max(10, min(4000, int(cur.fetchone()[0]) // 1000))})"
        # Partial: the index holds only what a search may return (ready and public).
        cur.execute(
            f"CREATE INDEX IF NOT EXISTS {space.table}_spec ON {space.table}"
            f" USING {using} (spec {space.opclass}){params} WHERE ready AND public"
        )

    def _sync(self, space: EngineSpace, *, rebuild: bool = False) -> IndexInfo:
        """Bring the space's table to the database's version (see the module's docstring)."""
        with self._transaction() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")  # a large catch-up is no search
            # Syncs of one space queue here first, before any table or row lock: two processes
            # catching up at once take their locks in one order and never deadlock.
            cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (space.space_id,))
            self._ensure(cur, space)
            cur.execute(
                "SELECT epoch, version, dim, encoding FROM pavedock_spaces WHERE space_id = %s FOR UPDATE",
                (space.space_id,),
            )
            epoch, version, dim, encoding = cur.fetchone()
            db_version = self._db_version(space.space_id)  # read under the lock: no stamp missed
            stale = (
                epoch != space.epoch or version > db_version or (dim, encoding) != (space.dim, space.encoding)
            )
            source = "engine"
            if rebuild or stale:
                if stale and not rebuild:
                    log.warning(
                        "vector engine: space %s is of another database or ahead; rebuilding", space.space_id
                    )
                cur.execute(f"TRUNCATE {space.table}")
                cur.execute(f"DROP INDEX IF EXISTS {space.table}_spec")
                self._write(cur, space, self._rows(space, None))
                self._create_spec_index(cur, space)
                source = "rebuilt"
            elif version < db_version:
                self._write(cur, space, self._rows(space, int(version)))
            cur.execute(
                "UPDATE pavedock_spaces SET version = %s, epoch = %s WHERE space_id = %s",
                (db_version, space.epoch, space.space_id),
            )
            cur.execute(f"SELECT count(*) FROM {space.table} WHERE ready AND public")
            size = int(cur.fetchone()[0])
        info = IndexInfo(space.space_id, size, db_version, source)
        self._seen[space.space_id] = info
        return info

    def _write(self, cur: Any, space: EngineSpace, batches: Iterator[list[tuple[Any, ...]]]) -> None:
        for batch in batches:
            gone = [row[0] for row in batch if row[5] is None]
            rows = [row for row in batch if row[5] is not None]
            if gone:
                cur.execute(f"DELETE FROM {space.table} WHERE learnware_id = ANY(%s)", (gone,))
            if rows:
                psycopg2.extras.execute_values(
                    cur,
                    f"INSERT INTO {space.table} (learnware_id, ready, public, labels, n_classes, spec)"
                    " VALUES %s ON CONFLICT (learnware_id) DO UPDATE SET ready = EXCLUDED.ready,"
                    " public = EXCLUDED.public, labels = EXCLUDED.labels,"
                    " n_classes = EXCLUDED.n_classes, spec = EXCLUDED.spec",
                    rows,
                    template=f"(%s, %s, %s, %s, %s, {space.placeholder})",
                )

    def _engine_version(self, space: EngineSpace) -> int | None:
        with self._transaction() as cur:
            cur.execute("SELECT to_regclass('pavedock_spaces') IS NOT NULL")
            if not cur.fetchone()[0]:
                self._ready_tables.clear()
                return None
            cur.execute("SELECT version, epoch FROM pavedock_spaces WHERE space_id = %s", (space.space_id,))
            row = cur.fetchone()
        if row is None:  # a new or wiped engine: its tables are made again
            self._ready_tables.discard(space.table)
        return None if row is None or row[1] != space.epoch else int(row[0])

    def _current(self, space_id: str) -> EngineSpace:
        """The space, with the engine brought up to the database's version first if behind."""
        space = self._space(space_id)
        if self._engine_version(space) != space.db_version:
            self._sync(space)
        return space

    # -- the interface ----------------------------------------------------------------------------

    def search(
        self, space_id: str, query: np.ndarray, k: int, *, label_names: Sequence[str] = ()
    ) -> tuple[list[Match], int]:
        space = self._current(space_id)
        q = self._query(space, query)
        if k <= 0:
            return [], space.db_version
        visible = "ready AND public"
        if label_names:
            user = sorted(label_set(label_names))
            # The tiers of label_maps.tier_of, each filtered inside the engine's index scan.
            filters: list[tuple[str, tuple[Any, ...]]] = [
                (f"{visible} AND labels @> %s::text[]", (user,)),
                (f"{visible} AND NOT labels @> %s::text[] AND n_classes >= %s", (user, len(user))),
                (f"{visible} AND n_classes < %s", (len(user),)),
            ]
        else:
            filters = [(visible, ())]
        return self.search_table(space, q, k, filters), space.db_version

    def search_table(
        self, space: EngineSpace, literal: str, k: int, filters: Sequence[tuple[str, tuple[Any, ...]]]
    ) -> list[Match]:
        """The top ``k`` of each filter (SQL over the table's columns) by exact cosine, merged."""
        found: dict[int, float] = {}
        with self._transaction() as cur:
            self._tune(cur)
            for where, params in filters:
                cur.execute(
                    f"SELECT learnware_id, spec {space.operator} {space.placeholder} AS distance"
                    f" FROM {space.table} WHERE {where} ORDER BY distance LIMIT %s",
                    (literal, *params, k),
                )
                found.update((int(i), float(d)) for i, d in cur.fetchall())
        matches = [Match(i, space.cosine(d)) for i, d in found.items()]
        matches.sort(key=lambda m: (-m.score, m.id))  # exact cosine order, ties by id
        return matches

    def _tune(self, cur: Any) -> None:
        if self.index_kind == "hnsw":
            cur.execute(f"SET LOCAL hnsw.ef_search = {int(self.ef_search)}")
            cur.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        elif self.index_kind == "ivfflat":
            cur.execute(f"SET LOCAL ivfflat.probes = {max(1, self.ef_search // 10)}")
            cur.execute("SET LOCAL ivfflat.iterative_scan = relaxed_order")

    @staticmethod
    def _query(space: EngineSpace, query: np.ndarray) -> str:
        arr = np.asarray(query).reshape(-1)
        if space.encoding == SIGN_BITS:
            if arr.dtype == np.uint8 and arr.size == packed_len(space.dim):
                return space.literal(arr)
            if arr.size != space.dim:
                raise IncompatibleSpec(
                    f"query has {arr.size} values, space {space.space_id} needs {space.dim}"
                )
            return space.literal(
                spec_from_bytes(np.ascontiguousarray(arr, dtype="<f4").tobytes(), space.dim, packed=True)
            )
        if arr.size != space.dim or not np.all(np.isfinite(arr)):
            raise IncompatibleSpec(f"query needs {space.dim} finite values, got {arr.size}")
        return space.literal(arr)

    def status(self, space_id: str) -> IndexInfo:
        space = self._space(space_id)
        if self._engine_version(space) != space.db_version:
            return self._sync(space)
        with self._transaction() as cur:
            cur.execute(f"SELECT count(*) FROM {space.table} WHERE ready AND public")
            size = int(cur.fetchone()[0])
        info = IndexInfo(space_id, size, space.db_version, "engine")
        self._seen[space_id] = info
        return info

    def rebuild(self, space_id: str) -> IndexInfo:
        return self._sync(self._space(space_id), rebuild=True)

    def publish(self, space_id: str) -> None:
        self._sync(self._space(space_id))

    def catch_up(self) -> None:
        with self.db.session() as session:
            ids = list(session.scalars(select(SpecSpaceRecord.id).order_by(SpecSpaceRecord.id)))
        for space_id in ids:
            space = self._space(space_id)
            if self._engine_version(space) != space.db_version:
                self._sync(space)

    def loaded_info(self, space_id: str) -> IndexInfo | None:
        return self._seen.get(space_id)

    def loaded(self) -> Sequence[IndexInfo]:
        return list(self._seen.values())

    def save_all(self) -> None:
        """Nothing to write: the engine keeps its own data."""

    def close(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
