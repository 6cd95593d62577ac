"""Deployment checks without an engine: the compose file validates; the prestart and first-key
commands work against a fresh database."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from app.auth.service import hash_token
from app.db.models import ApiKey, Role

ROOT = Path(__file__).resolve().parents[1]


def test_compose_file_validates() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (Debian package docker-compose; .ci/run installs it)")
    result = subprocess.run(
        [binary, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


def test_compose_has_the_production_services_with_healthchecks() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {
        "postgres",
        "vectors",
        "redis",
        "prestart",
        "api",
        "worker-cpu",
        "worker-gpu",
        "flower",
    }
    for name in ("postgres", "vectors", "redis", "api", "worker-cpu", "worker-gpu", "flower"):
        assert "healthcheck" in services[name], name
    assert services["prestart"]["command"][:3] == ["pavedock", "db", "upgrade"]
    assert services["api"]["depends_on"]["prestart"]["condition"] == "service_completed_successfully"
    assert "--queues gpu" in " ".join(services["worker-gpu"]["command"])
    assert services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == [
        "gpu"
    ]
    assert services["vectors"]["image"].startswith("pgvector/pgvector:")
    assert "PAVEDOCK_VECTOR_ENGINE_URL" in compose["x-dock-env"]
    for dockerfile in ("docker/Dockerfile", "docker/worker-gpu.Dockerfile"):
        assert (ROOT / dockerfile).is_file()


def test_prestart_and_the_first_admin_key_from_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "PAVEDOCK_DATA_DIR": str(tmp_path / "var"), "PAVEDOCK_DATABASE_URL": ""}
    pavedock = [sys.executable, "-m", "app.cli.main"]
    upgrade = subprocess.run([*pavedock, "db", "upgrade"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert upgrade.returncode == 0, upgrade.stderr
    created = subprocess.run(
        [*pavedock, "keys", "create", "--role", "admin", "--name", "first"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip().splitlines()[-1]
    assert token.startswith("pdk_")
    engine = create_engine(f"sqlite:///{tmp_path / 'var' / 'dock.sqlite'}")
    with Session(engine) as session:
        key = session.scalar(select(ApiKey))
        assert key is not None and key.role == Role.admin and key.key_hash == hash_token(token)
    engine.dispose()
