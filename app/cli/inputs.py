"""The user's files as the CLI reads them: a bad file is one line on stderr naming the file and
the line, and exit code 2 (a usage error), never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import typer


def bad_input(message: str) -> NoReturn:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(2)


def read_jsonl_objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Each line's JSON object with its line number (``app.ml.jsonl``: BOM, CRLF, separators
    inside strings); a bad line ends the command with its number."""
    from app.ml.jsonl import JsonlError, read_objects

    try:
        return read_objects(path)
    except JsonlError as exc:
        bad_input(str(exc))
