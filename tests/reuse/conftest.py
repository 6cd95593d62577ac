"""The API fixtures (a real migrated database on SQLite and PostgreSQL) serve the reuse tests too."""

from tests.api.conftest import client, database_url, keys, runtime, settings

__all__ = ["client", "database_url", "keys", "runtime", "settings"]
