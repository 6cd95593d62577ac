"""What a model already says about itself: the licence, tags and description of its model card.

``pavedock package`` fills the manifest fields a developer did not give from here. A folder
written by the Hugging Face tools (``push_to_hub``, ``Trainer.create_model_card``, peft's
``save_pretrained``, a downloaded hub snapshot) has a ``README.md`` model card whose YAML front
matter holds ``license`` and ``tags``, and whose "Model description" section describes the
model; an ONNX file has a ``doc_string``. Nothing here runs code: YAML is read with
``safe_load`` and ONNX with protobuf alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CARD_NAME = "README.md"
# Front matter of at most this many bytes is read (a card is a few KiB; a huge one is no card).
MAX_CARD_BYTES = 1024 * 1024
MAX_DESCRIPTION_CHARS = 2000
# The hub's licence ids are lower-case SPDX ids; the manifest takes the SPDX spelling.
SPDX_SPELLING = {
    spdx.lower(): spdx
    for spdx in (
        "Apache-2.0",
        "MIT",
        "BSD-2-Clause",
        "BSD-3-Clause",
        "CC0-1.0",
        "CC-BY-4.0",
        "CC-BY-SA-4.0",
        "CC-BY-NC-4.0",
        "CC-BY-NC-SA-4.0",
        "CC-BY-NC-ND-4.0",
        "GPL-2.0",
        "GPL-3.0",
        "LGPL-3.0",
        "AGPL-3.0",
        "MPL-2.0",
        "EPL-2.0",
        "AFL-3.0",
        "Artistic-2.0",
        "BSL-1.0",
        "ISC",
        "Unlicense",
        "WTFPL",
    )
}
# Not licences: the hub's placeholders.
NO_LICENSE = {"", "unknown", "other"}
# Tags that say which library wrote the files, not what the model does; and the hub's machine
# tags ("base_model:adapter:…", "license:mit", …), which all hold a colon.
LIBRARY_TAGS = {"generated_from_trainer", "transformers", "safetensors", "peft", "pytorch", "onnx"}
_PLACEHOLDER = re.compile(r"more information needed", re.I)
_DESCRIPTION_HEADING = re.compile(r"^#{1,6}\s*model description\s*$", re.I)


@dataclass
class CardFields:
    """Manifest fields a model card gives; empty where it gives none."""

    license: str | None = None
    tags: list[str] = field(default_factory=list)
    description: str = ""
    where: str = ""
    """Where they were read, for the notes: ``README.md`` or ``the ONNX doc_string``."""


def spdx_license(value: str) -> str:
    """A hub licence id in its SPDX spelling where it is a known one (``apache-2.0`` → ``Apache-2.0``)."""
    return SPDX_SPELLING.get(value.strip().lower(), value.strip())


def split_card(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body) of a model card; an empty dict when it has no YAML front matter."""
    match = re.match(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?$\n?", text, re.S | re.M)
    if match is None:
        return {}, text
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        meta = None
    return (meta if isinstance(meta, dict) else {}), text[match.end() :]


def _description(body: str) -> str:
    """The first prose paragraph under a "Model description" heading, placeholders skipped."""
    lines = re.sub(r"<!--.*?-->", "", body, flags=re.S).splitlines()
    inside = False
    paragraph: list[str] = []
    for line in [*lines, ""]:
        stripped = line.strip()
        if stripped.startswith("#"):
            if inside and paragraph:
                break
            inside = bool(_DESCRIPTION_HEADING.match(stripped))
            continue
        if not inside:
            continue
        if stripped and not stripped.startswith(("-", "*", "|", "{", "<", ">")):
            paragraph.append(stripped)
            continue
        if paragraph:
            text = " ".join(paragraph)
            if not _PLACEHOLDER.search(text):
                return text[:MAX_DESCRIPTION_CHARS]
            paragraph = []
    return ""


def _tags(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    tags = [str(t).strip() for t in value if isinstance(t, str | int) and str(t).strip()]
    return [t for t in tags if ":" not in t and t.lower() not in LIBRARY_TAGS]


def read_card(folder: Path) -> CardFields:
    """The licence, tags and description of the folder's ``README.md`` model card, if any."""
    path = folder / CARD_NAME
    if not path.is_file() or path.stat().st_size > MAX_CARD_BYTES:
        return CardFields()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return CardFields()
    meta, body = split_card(text)
    raw = meta.get("license")
    license = str(raw).strip() if isinstance(raw, str) else None
    if license is not None and license.lower() == "other" and isinstance(meta.get("license_name"), str):
        license = str(meta["license_name"]).strip()
    if license is not None and license.lower() in NO_LICENSE:
        license = None
    return CardFields(
        license=spdx_license(license) if license else None,
        tags=_tags(meta.get("tags")),
        description=_description(body),
        where=CARD_NAME,
    )


def onnx_card(doc_string: str) -> CardFields:
    """An ONNX model's ``doc_string`` as its description (ONNX has no licence or tags field)."""
    text = " ".join(doc_string.split())
    return CardFields(description=text[:MAX_DESCRIPTION_CHARS], where="the ONNX doc_string")
