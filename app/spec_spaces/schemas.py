"""Spec space bodies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SpecSpaceRead(BaseModel):
    id: str
    dim: int
    default: bool
    config: dict[str, Any] = Field(description="the SpecSpaceConfig: app.ml.spec_space.config_from_dict")
    description: dict[str, Any] = Field(description="SpecSpace.describe(): base hash, layers, shapes")
    index_version: int
    indexed: int | None = Field(description="specs in this API process's index (None: not loaded)")
    spec_format: str = Field(
        default="safetensors file with one F32 tensor 'pave' of shape (dim,) and metadata space_id "
        "(what app.ml.pave.PaveSpec.save writes)"
    )
