"""The admin dashboard's settings: same ``PAVEDOCK_`` prefix and ``.env`` as ``app.settings``.

Kept beside the dashboard so the service's settings object stays about the service; an
operator sets both the same way (``PAVEDOCK_FLOWER_URL=…``).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class AdminSettings(BaseSettings):
    """Where Flower is, and how the dashboard samples the dock's own metrics."""

    model_config = SettingsConfigDict(env_prefix="PAVEDOCK_", env_file=".env", extra="ignore")

    flower_url: str = "http://127.0.0.1:5555"
    """Flower as an admin's browser reaches it (linked from the page); empty hides the link."""
    flower_port: int | None = Field(default=None, ge=1, le=65535)
    """Flower's port, replacing the one in ``flower_url`` (``PAVEDOCK_FLOWER_PORT=5556``)."""
    serve_flower: bool = True
    """``pavedock serve`` starts Flower on ``flower_url``'s host and port (a local URL only)."""
    admin_sample_interval_s: float = Field(default=10.0, gt=0)
    """How often request counts and latencies are sampled for the charts."""
    admin_history_samples: int = Field(default=360, ge=2)
    """Samples kept in memory per API process (360 × 10 s = one hour)."""
    worker_inspect_timeout_s: float = Field(default=3.0, gt=0)
    """How long a remote-control broadcast waits for workers to answer (the embedded broker
    polls its folders, so its workers answer in one to two seconds)."""
    worker_inspect_interval_s: float = Field(default=10.0, gt=0)
    """Workers are asked what they run at most this often, and only while someone looks."""

    @field_validator("flower_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if value and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(f"PAVEDOCK_FLOWER_URL must be an http(s) URL, not {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _port(self) -> AdminSettings:
        if self.flower_port is not None and self.flower_url:
            url = urlsplit(self.flower_url)
            host = url.hostname or "127.0.0.1"
            host = f"[{host}]" if ":" in host else host
            self.flower_url = urlunsplit(url._replace(netloc=f"{host}:{self.flower_port}")).rstrip("/")
        return self
