"""Flower beside ``pavedock serve``: started where the dashboard links to, only on loopback.
That it really starts and answers is checked by the browser test (tests/browser)."""

from __future__ import annotations

import pytest

from app.admin.flower import flower_command
from app.settings import Settings


@pytest.mark.parametrize(
    ("url", "serve", "started"),
    [
        ("http://127.0.0.1:5555", True, True),
        ("http://localhost:5600/flower/", True, True),
        ("http://[::1]:5555", True, True),
        ("http://127.0.0.1:5555", False, False),
        ("", True, False),
        ("https://flower.dock.example", True, False),
        ("http://10.0.0.5:5555", True, False),
    ],
)
def test_flower_is_started_only_on_loopback(url: str, serve: bool, started: bool) -> None:
    command = flower_command(Settings(flower_url=url, serve_flower=serve))
    assert (command is not None) == started
    if command is not None:
        assert "flower" in command and "--logging=error" in command


def test_flower_options_follow_the_url() -> None:
    command = flower_command(Settings(flower_url="http://localhost:5600/flower/"))
    assert command is not None
    assert {"--address=localhost", "--port=5600", "--url_prefix=flower"} <= set(command)


def test_settings_refuse_a_url_that_is_not_http() -> None:
    with pytest.raises(ValueError, match="http"):
        Settings(flower_url="javascript:alert(1)")
