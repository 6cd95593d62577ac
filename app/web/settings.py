"""The web pages' settings: same ``PAVEDOCK_`` prefix and ``.env`` as ``app.settings``."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class WebSettings(BaseSettings):
    """How browser sessions are signed and kept."""

    model_config = SettingsConfigDict(env_prefix="PAVEDOCK_", env_file=".env", extra="ignore")

    web_session_secret: SecretStr | None = None
    """Signs session cookies and CSRF tokens. Unset: a random secret is made once and kept in
    ``<data_dir>/web-session.key`` (enough for API processes that share a data folder; set it
    when API processes run on several machines)."""
    web_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    """A sign-in lasts this long (the key's own expiry and revocation end it sooner)."""
    web_cookie_secure: bool | None = None
    """Send the session cookie over HTTPS only; unset: on in production, off otherwise."""
    web_page_size: int = Field(default=12, ge=1, le=100)
    """Learnware cards per page."""
