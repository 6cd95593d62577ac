"""What one dock process holds: settings, database, artifact store, indexes, job dispatcher.

The API keeps one in its app state; a worker and the CLI build their own. Nothing here is a
module-level singleton, so tests run several dock instances side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.db.session import Database
from app.index.engine import VectorEngine, make_engine
from app.jobs.dispatch import DISPATCHER, CeleryDispatcher
from app.ml.bases import use_data_dir
from app.ml.threads import use_torch_threads
from app.settings import Settings
from app.spec_spaces.service import default_space_id
from app.storage.store import ArtifactStore, make_store


@dataclass
class Runtime:
    settings: Settings
    db: Database
    store: ArtifactStore
    indexes: VectorEngine
    celery: Any
    default_space_id: str
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, settings: Settings, *, persist_index: bool, celery_app: Any = None) -> Runtime:
        """Build a process's runtime. ``persist_index``: this process writes index files."""
        from workers.celery_app import make_celery

        settings.ensure_dirs()
        use_data_dir(settings.data_dir)  # installed bases (all-mpnet-base-v2) live under it
        use_torch_threads(settings.torch_threads)
        celery = celery_app if celery_app is not None else make_celery(settings)
        db = Database(settings.resolved_database_url, info={DISPATCHER: CeleryDispatcher(celery)})
        return cls(
            settings=settings,
            db=db,
            store=make_store(settings),
            indexes=make_engine(settings, db, persist=persist_index),
            celery=celery,
            default_space_id=default_space_id(settings),
        )

    def close(self) -> None:
        self.indexes.close()
        self.db.dispose()
