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
    encoding: str = Field(
        description='"sign-bits": specs are ±1, stored and indexed as packed bits (dim/8 bytes); '
        '"float32": continuous values'
    )
    spec_format: str = Field(
        default="safetensors file with one tensor 'pave' and metadata space_id: F32 of shape (dim,) "
        "(what app.ml.pave.PaveSpec.save writes), or, in a sign-bits space, U8 of shape (ceil(dim/8),): "
        "the signs packed by numpy.packbits, bit 1 = +1"
    )
