"""Labelled examples as people have them: pasted or uploaded CSV, TSV or JSONL.

- JSONL: one ``{"text": ..., "label": ...}`` object a line (``sentence``/``content`` and
  ``class``/``category`` are accepted as the names too).
- CSV and TSV: a header naming the text and label columns (same names as above, any order,
  any case), or no header and two columns, text then label.
- Bytes are read as UTF-8 (with or without a BOM) or UTF-16 with a BOM; anything else is refused
  with the position of the first byte that is not UTF-8, never guessed.
- Label names are the ones given, or else the labels' own in the order they first appear.

Every refusal is an ``InvalidInput`` naming the line, so the page can show it beside the field.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Literal

from app.web.errors import FieldError

Format = Literal["jsonl", "csv", "tsv"]
TEXT_NAMES = ("text", "sentence", "content", "review", "message")
LABEL_NAMES = ("label", "class", "category", "target")


class ShotsError(FieldError):
    """Bad examples (shown beside the examples field unless another is named)."""

    def __init__(self, message: str, field: str = "examples"):
        super().__init__(message, field)


@dataclass(frozen=True)
class Shots:
    texts: list[str]
    labels: list[str]
    label_names: list[str]
    format: Format


def decode(data: bytes) -> str:
    """UTF-8 (BOM or not) or UTF-16 with a BOM; refuses other encodings with where they fail."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ShotsError(
                f"the file starts as UTF-16 but is not: {exc.reason} at byte {exc.start}"
            ) from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ShotsError(
            f"the file is not UTF-8 (byte {exc.start} is {data[exc.start]:#04x}): save it as UTF-8 and upload it again"
        ) from exc


def detect(text: str, filename: str = "") -> Format:
    name = filename.lower()
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith((".tsv", ".tab")):
        return "tsv"
    if name.endswith(".csv"):
        return "csv"
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.lstrip().startswith("{"):
        return "jsonl"
    return "tsv" if "\t" in first else "csv"


def _pick(fields: dict[str, object], names: tuple[str, ...]) -> str | None:
    lowered = {k.strip().lower(): k for k in fields}
    for name in names:
        if name in lowered:
            return lowered[name]
    return None


def _jsonl(text: str) -> list[tuple[int, str, str]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ShotsError(f"line {number} is not JSON: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise ShotsError(f'line {number} is not a JSON object like {{"text": "...", "label": "..."}}')
        text_key, label_key = _pick(obj, TEXT_NAMES), _pick(obj, LABEL_NAMES)
        if text_key is None or label_key is None:
            raise ShotsError(f"line {number} has no {'text' if text_key is None else 'label'} field")
        rows.append((number, obj[text_key], obj[label_key]))
    return [(n, _as_text(n, t, "text"), _as_text(n, y, "label")) for n, t, y in rows]


def _as_text(number: int, value: object, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ShotsError(
            f"line {number}: the {what} must be a string{' or a class id' if what == 'label' else ''}"
        )
    return str(value)


def _delimited(text: str, delimiter: str) -> list[tuple[int, str, str]]:
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    try:
        table = [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    except csv.Error as exc:
        raise ShotsError(f"line {reader.line_num}: {exc}") from exc
    if not table:
        return []
    _, head = table[0]
    header = dict.fromkeys(head)
    text_col, label_col = _pick(header, TEXT_NAMES), _pick(header, LABEL_NAMES)
    if text_col is not None and label_col is not None:
        ti, li = head.index(text_col), head.index(label_col)
        table = table[1:]
    else:
        ti, li = 0, 1
    rows = []
    for number, row in table:
        if len(row) <= max(ti, li):
            raise ShotsError(
                f"line {number} has {len(row)} column{'s' if len(row) != 1 else ''}: each needs a text and a label"
            )
        rows.append((number, row[ti], row[li].strip()))
    return rows


def _label_names(given: str) -> list[str]:
    names = [n.strip() for n in given.split(",") if n.strip()]
    if len(names) == 1:
        raise ShotsError("give at least two label names, separated by commas", field="label_names")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ShotsError(f"label names repeat: {duplicates}", field="label_names")
    return names


def parse(text: str, *, label_names: str = "", filename: str = "", max_examples: int = 1024) -> Shots:
    """The examples in ``text`` and their label names (``label_names``: comma-separated, optional)."""
    fmt = detect(text, filename)
    rows = _jsonl(text) if fmt == "jsonl" else _delimited(text, "\t" if fmt == "tsv" else ",")
    if len(rows) < 2:
        raise ShotsError(
            f"found {len(rows)} example{'s' if len(rows) != 1 else ''} ({fmt}): a task needs at least two"
        )
    if len(rows) > max_examples:
        raise ShotsError(f"{len(rows)} examples, over the limit of {max_examples}")
    for number, body, label in rows:
        if not body.strip():
            raise ShotsError(f"line {number}: the text is empty")
        if not label:
            raise ShotsError(f"line {number}: the label is empty")
    labels = [label for _, _, label in rows]
    names = _label_names(label_names)
    if names:
        if all(label.isdigit() for label in labels) and not set(labels) & set(names):
            bad = sorted({int(y) for y in labels if int(y) >= len(names)})
            if bad:
                raise ShotsError(
                    f"label ids {bad} are out of range for {len(names)} label names", field="label_names"
                )
            labels = [names[int(y)] for y in labels]
        unknown = sorted(set(labels) - set(names))
        if unknown:
            raise ShotsError(f"labels {unknown} are not among the label names {names}", field="label_names")
    else:
        if all(label.isdigit() for label in labels):
            raise ShotsError(
                "the labels are class ids: give the label names (in the order of the ids)",
                field="label_names",
            )
        names = list(dict.fromkeys(labels))
    if len(set(labels)) < 2:
        raise ShotsError("the examples cover a single class: a task needs at least two")
    return Shots(texts=[body for _, body, _ in rows], labels=labels, label_names=names, format=fmt)
