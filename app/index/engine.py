"""The vector engine a process searches specs in, chosen by ``PAVEDOCK_VECTOR_ENGINE``.

Two engines stand behind one interface:

- ``faiss`` (default): ``IndexRegistry``, an embedded index per spec space in every process,
  synced from the database by its version counter (``app/index/registry.py``);
- ``pgvector``: ``PgVectorEngine``, one PostgreSQL server with the pgvector extension that every
  API process and worker shares, for a market beyond one machine (``app/index/pgvector.py``).

Either way the database stays the truth: a learnware enters the index when its row is stamped
with a new ``index_seq`` (in the transaction that makes it ready), and an engine applies the
rows stamped since the version it last applied. The stamp is the outbox: an engine that was
down applies them when it is back, and applying twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from app.db.session import Database
from app.errors import VectorEngineUnavailable
from app.index.registry import TIER_OVERFETCH, IndexInfo, IndexRegistry
from app.ml.identify import Match

if TYPE_CHECKING:
    from app.settings import Settings

__all__ = ["TIER_OVERFETCH", "VectorEngine", "VectorEngineUnavailable", "make_engine"]


class VectorEngine(Protocol):
    """What the dock asks of the index of specs, whatever engine holds it."""

    name: str

    def search(
        self, space_id: str, query: np.ndarray, k: int, *, label_names: Sequence[str] = ()
    ) -> tuple[list[Match], int]:
        """Ready public learnwares by exact cosine with ``query``, best first, and the index
        version searched. Without ``label_names`` the top ``k``; with a task's label names the
        top ``k`` of each tier of what a learnware's labels can answer (``label_maps.Tier``), so
        the caller fills ``k`` from the best tier down (an engine without label filters
        returns the top ``TIER_OVERFETCH * k`` instead)."""
        ...

    def status(self, space_id: str) -> IndexInfo:
        """The space's index brought up to the database's version: its size and version."""
        ...

    def rebuild(self, space_id: str) -> IndexInfo:
        """Drop the space's index and fill it again from the specs in the database."""
        ...

    def publish(self, space_id: str) -> None:
        """Called after a transaction stamped learnwares of the space: apply them now where the
        index is shared (best effort: ``catch_up`` applies whatever this could not)."""
        ...

    def catch_up(self) -> None:
        """Apply what the database stamped since the engine's version, for every space (the
        reaper calls it periodically, so learnwares ingested while the engine was down are
        indexed once it is back)."""
        ...

    def loaded_info(self, space_id: str) -> IndexInfo | None:
        """What this process last saw of a space's index, without syncing (None: never)."""
        ...

    def loaded(self) -> Sequence[IndexInfo]: ...

    def save_all(self) -> None:
        """Write what this process keeps of the index to disk (where it keeps anything)."""
        ...

    def close(self) -> None: ...


def make_engine(settings: Settings, db: Database, *, persist: bool) -> VectorEngine:
    """The engine the settings choose. ``persist``: this process writes the embedded index files."""
    if settings.vector_engine == "pgvector":
        from app.index.pgvector import PgVectorEngine

        return PgVectorEngine(
            db,
            settings.vector_engine_url,
            index=settings.vector_engine_index,
            ef_search=settings.vector_engine_ef_search,
            timeout_s=settings.vector_engine_timeout_s,
        )
    return IndexRegistry(
        db, settings.resolved_index_dir, persist=persist, save_interval_s=settings.index_save_interval_s
    )
