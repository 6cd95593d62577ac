"""One settings object: embedded defaults, environment overrides, no placeholder secrets in production."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings


def test_defaults_serve_the_embedded_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "PAVEDOCK_DATABASE_URL",
        "PAVEDOCK_BROKER_URL",
        "PAVEDOCK_DATA_DIR",
        "PAVEDOCK_STORAGE_BACKEND",
    ):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.environment == "development"
    assert settings.resolved_database_url.startswith(
        "sqlite:///"
    ) and settings.resolved_database_url.endswith("var/dock.sqlite")
    assert settings.resolved_broker_url == "filesystem://localhost/"
    assert settings.resolved_artifacts_dir == Path("var/artifacts")
    assert settings.storage_backend == "local"
    assert len(settings.space_configs) == 1 and settings.space_configs[0].base == "all-MiniLM-L6-v2"


def test_environment_variables_configure_production(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAVEDOCK_ENVIRONMENT", "production")
    monkeypatch.setenv("PAVEDOCK_DATABASE_URL", "postgresql+psycopg2://dock:s3cret@db/dock")
    monkeypatch.setenv("PAVEDOCK_BROKER_URL", "redis://redis:6379/0")
    monkeypatch.setenv("PAVEDOCK_REVIEW_REQUIRED", "true")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.resolved_database_url.startswith("postgresql")
    assert settings.resolved_broker_url == "redis://redis:6379/0"
    assert settings.review_required is True


@pytest.mark.parametrize(
    "overrides",
    [
        {"database_url": "postgresql+psycopg2://dock:changethis@db/dock"},
        {"broker_url": "redis://:changethis@redis:6379/0"},
        {"storage_backend": "s3", "s3_bucket": "b", "s3_secret_access_key": "change-me"},
    ],
)
def test_placeholder_secrets_are_refused_outside_development(overrides: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="placeholder"):
        Settings(_env_file=None, environment="production", **overrides)  # type: ignore[call-arg]
    Settings(_env_file=None, environment="development", **overrides)  # type: ignore[call-arg]


def test_torch_threads_reach_the_ml_core_through_the_runtime(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ML core reads no environment: the runtime hands it the settings' torch threads."""
    import torch

    from app.ml import encoders, threads
    from app.runtime import Runtime

    if torch.cuda.is_available():
        pytest.skip("torch threads are left alone on a GPU host")
    monkeypatch.setattr(threads, "_threads", None)
    monkeypatch.setenv("PAVEDOCK_TORCH_THREADS", "3")  # read by Settings only, not by the core
    before = torch.get_num_threads()
    try:
        encoders.configure_threads()
        assert torch.get_num_threads() == (os.cpu_count() or 1)
        runtime = Runtime.create(settings.model_copy(update={"torch_threads": 1}), persist_index=False)
        runtime.close()
        encoders.configure_threads()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_torch_threads_unset_when_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAVEDOCK_TORCH_THREADS", "")
    assert Settings(_env_file=None).torch_threads is None  # type: ignore[call-arg]
    monkeypatch.setenv("PAVEDOCK_TORCH_THREADS", "2")
    assert Settings(_env_file=None).torch_threads == 2  # type: ignore[call-arg]
    monkeypatch.setenv("PAVEDOCK_TORCH_THREADS", "0")
    with pytest.raises(ValidationError, match="torch_threads"):
        Settings(_env_file=None)  # type: ignore[call-arg]
