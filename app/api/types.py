"""Bounded input types shared by the request schemas and the routes' parameters.

Every number a request gives is bounded by what the database can hold and every string is one
it can store, so bad input is a 422 naming the field, never a 500 from the driver: ids fit the
database's integer, pages and offsets its 64-bit OFFSET, and texts hold neither NUL (PostgreSQL
cannot store U+0000, in TEXT or in JSONB) nor lone surrogates (not Unicode: they cannot be
encoded as UTF-8).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import AfterValidator, Field

MAX_ID = 2**31 - 1
"""Ids are the database's INTEGER (32 bits on PostgreSQL)."""
MAX_PAGE = 1_000_000
MAX_OFFSET = 2**62


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored (None if it can)."""
    at = text.find("\x00")
    if at >= 0:
        return f"contains a NUL character (U+0000) at position {at}, which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate (U+{ord(text[exc.start]):04X}) at position {exc.start}, "
            "which is not valid Unicode"
        )
    return None


def find_unstorable(value: Any, where: str = "") -> str | None:
    """The first string in ``value`` (nested lists and mappings, keys included) that cannot be
    stored, as ``"<path>: <why>"``; None if all can."""
    if isinstance(value, str):
        problem = unstorable(value)
        return f"{where or 'value'}: {problem}" if problem else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            found = find_unstorable(str(key), f"{path} (the key)") or find_unstorable(item, path)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = find_unstorable(item, f"{where}[{i}]")
            if found:
                return found
    return None


def _storable_text(value: str) -> str:
    problem = unstorable(value)
    if problem:
        raise ValueError(problem)
    return value


def _storable_optional(value: str | None) -> str | None:
    return None if value is None else _storable_text(value)


def _storable_json(value: Any) -> Any:
    problem = find_unstorable(value)
    if problem:
        raise ValueError(problem)
    return value


_NO_NUL = {"pattern": "^[^\\u0000]*$"}  # documents the rule in the OpenAPI (the validators enforce it)
Text = Annotated[str, AfterValidator(_storable_text), Field(json_schema_extra=_NO_NUL)]
"""A string the database can store: no NUL, no lone surrogates."""
Json = Annotated[dict[str, Any], AfterValidator(_storable_json)]
"""A JSON object whose strings (and keys) the database can store."""
Name = Annotated[Text, Field(min_length=1, max_length=128)]
Label = Annotated[Text, Field(min_length=1, max_length=200)]
Shot = Annotated[Text, Field(max_length=20_000)]
"""One example text."""
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
ClassId = Annotated[int, Field(ge=0, le=100_000)]
MAX_SHOTS = 5000
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]

# Route parameters.
PathId = Annotated[int, Path(ge=1, le=MAX_ID, description="an id (1 to 2³¹−1)")]
PathText = Annotated[str, Path(min_length=1, max_length=200), AfterValidator(_storable_text)]
PageQuery = Annotated[int, Query(ge=1, le=MAX_PAGE, description="1-based page number")]
OffsetQuery = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
TextQuery = Annotated[str | None, Query(max_length=200), AfterValidator(_storable_optional)]
"""An optional text filter."""
TextItem = Annotated[str, Field(max_length=200), AfterValidator(_storable_text)]
"""One text of a repeated query parameter (``?label=a&label=b``)."""
IdQuery = Annotated[int | None, Query(ge=1, le=MAX_ID, description="an id (1 to 2³¹−1)")]
"""An optional id filter."""
