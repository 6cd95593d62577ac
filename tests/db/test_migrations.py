"""The schema is the migrations': they build every table the models declare, and nothing else."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from app.db.base import Base
from app.db.migrate import downgrade, head_revision, upgrade
from tests.fixtures.service import script_head


def test_the_migrated_schema_matches_the_models(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata
            )
        assert diff == []
    finally:
        engine.dispose()


def test_upgrade_and_downgrade_round_trip(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'round.sqlite'}"
    upgrade(url)
    engine = create_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) >= {
            "learnwares",
            "jobs",
            "api_keys",
            "specs",
            "user_tasks",
            "spec_spaces",
        }
        downgrade(url, "base")
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        upgrade(url)
        assert "jobs" in inspect(engine).get_table_names()
        assert head_revision(url) == script_head(url)
        downgrade(url, "0001")  # the reuse columns come and go with their migration
        assert "private" not in {c["name"] for c in inspect(engine).get_columns("learnwares")}
        upgrade(url)
        assert "params" in {c["name"] for c in inspect(engine).get_columns("jobs")}
    finally:
        engine.dispose()


def test_constraints_are_named_by_convention(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        inspector = inspect(engine)
        fks = {fk["name"] for fk in inspector.get_foreign_keys("jobs")}
        assert "fk_jobs_learnware_id_learnwares" in fks
        checks = {ck["name"] for ck in inspector.get_check_constraints("jobs")}
        assert {"ck_jobs_progress_range", "ck_jobs_job_state"} <= checks
    finally:
        engine.dispose()
