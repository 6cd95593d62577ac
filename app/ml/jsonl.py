"""One JSONL reader for every file the dock reads line by line: few-shot examples, calibration
sets, and a package's declared inputs.

Lines end at ``\\n`` alone (a ``\\r`` before it is dropped). ``str.splitlines()`` also splits at
U+2028, U+2029, U+0085 and other separators JSON lets a string hold raw, cutting a valid line
in two. A UTF-8 byte-order mark is skipped, blank lines are ignored, and a line that is not
JSON (or not UTF-8) is reported with its number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.ml.errors import InvalidInput

_BOM = b"\xef\xbb\xbf"
_JSON_BLANK = " \t\r"
"""What JSON counts as whitespace on a line; U+2028 and friends are not blank."""


class JsonlError(InvalidInput):
    """A JSONL file that cannot be read: its message names the file and the line."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


def parse_jsonl(data: bytes | str, source: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of ``data``; ``source`` names the file in
    errors (``"shots.jsonl"``, ``"inputs file 'inputs.jsonl'"``)."""
    if isinstance(data, bytes):
        data = data.removeprefix(_BOM)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            at = data.count(b"\n", 0, exc.start) + 1
            raise JsonlError(f"{source} is not UTF-8: line {at}: {exc.reason}", at) from None
    else:
        text = data.removeprefix("\ufeff")
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(_JSON_BLANK):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JsonlError(
                f"{source} line {number} is not JSON: {exc.msg} at column {exc.colno}", number
            ) from None
        except RecursionError:
            raise JsonlError(f"{source} line {number} is not JSON: nested too deeply", number) from None
        yield number, value


def read_jsonl(path: Path, source: str | None = None) -> Iterator[tuple[int, Any]]:
    """``parse_jsonl`` of the file at ``path`` (named by its path unless ``source`` is given)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise JsonlError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_jsonl(data, source or str(path))


def read_objects(path: Path, source: str | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Every line's JSON object with its line number; a line holding anything else is an error."""
    rows = []
    for number, value in read_jsonl(path, source):
        if not isinstance(value, dict):
            raise JsonlError(
                f"{source or path} line {number} is not a JSON object, it is {type(value).__name__}", number
            )
        rows.append((number, value))
    return rows
