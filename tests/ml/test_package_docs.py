"""docs/packages.md cannot drift from the code that checks packages: its reference block is the
generated one, every manifest field has a line, and its manifest example is a valid manifest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.ml.package_docs import BEGIN, END, FIELD_DOCS, manifest_reference_markdown
from app.ml.packages import Manifest, parse_manifest

DOC = Path(__file__).resolve().parents[2] / "docs" / "packages.md"


def test_the_reference_block_is_the_generated_one() -> None:
    text = DOC.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert block == manifest_reference_markdown(), "docs/packages.md is stale: run `make docs`"


def test_every_manifest_field_is_documented_and_no_other() -> None:
    assert set(FIELD_DOCS) == set(Manifest.model_fields)
    table = manifest_reference_markdown()
    for name in Manifest.model_fields:
        assert f"| `{name}` |" in table


def test_a_new_field_without_a_line_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(FIELD_DOCS, "license")
    with pytest.raises(ValueError, match="missing \\['license'\\]"):
        manifest_reference_markdown()


def test_the_manifest_examples_are_valid_manifests() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks
    for block in blocks:
        parse_manifest(block)
