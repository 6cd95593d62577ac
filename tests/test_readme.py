"""What issue 12's newcomer needs from the README is on it: the package format's page from the
first screen, and the ports and the client's URL documented side by side."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def first_screen() -> str:
    """The README up to its first section heading: what a reader sees before scrolling."""
    text = README.read_text(encoding="utf-8")
    return text[: text.index("\n## ")]


def test_the_first_screen_links_the_package_format() -> None:
    screen = first_screen()
    assert "(docs/packages.md)" in screen and "pavedock package" in screen
    assert (README.parent / "docs" / "packages.md").is_file()


def test_ports_and_the_clients_url_are_documented_together() -> None:
    text = README.read_text(encoding="utf-8")
    paragraph = next(p for p in text.split("\n\n") if "Ports and where the client looks" in p)
    for needed in ("PAVEDOCK_PORT", "--port", "PAVEDOCK_URL", "--url", "PAVEDOCK_FLOWER_PORT"):
        assert needed in paragraph, needed
