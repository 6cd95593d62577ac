"""Request and response bodies of the key endpoints."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.api.types import Text
from app.db.models import Role


class KeyCreate(BaseModel):
    role: Role
    name: Text = Field(min_length=1, max_length=100)
    expires_in_days: float | None = Field(
        default=None, gt=0, le=36500, allow_inf_nan=False, description="none: never expires"
    )


class KeyRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    prefix: str
    role: Role
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class KeyIssued(KeyRead):
    token: str = Field(description="the secret key: shown once, store it now")
