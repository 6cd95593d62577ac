"""One way to point every client command at a dock: --url / PAVEDOCK_URL, defaulting to where
``pavedock serve`` listens (a running serve of the same data folder, else PAVEDOCK_HOST/PORT)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import typer

from app.admin.flower import flower_command
from app.cli.main import app
from app.cli.where import default_dock_url, record_serve_url, running_serve_url, serve_url
from app.settings import Settings


def client_commands() -> dict[str, Any]:
    """Every command that talks to a dock's API (they take an API key), by its full name."""
    found: dict[str, Any] = {}

    def walk(command: Any, name: str) -> None:  # typer's own click: duck-typed
        if hasattr(command, "commands"):
            for sub_name, sub in command.commands.items():
                walk(sub, f"{name} {sub_name}".strip())
        elif any(p.name == "key" for p in command.params):
            found[name] = command

    walk(typer.main.get_command(app), "")
    return found


def test_every_client_command_takes_url_and_pavedock_url() -> None:
    commands = client_commands()
    assert {"submit", "task", "demo", "jobs wait", "download", "merge", "learnwares"} <= set(commands)
    for name, command in commands.items():
        url = next((p for p in command.params if p.name == "url"), None)
        assert url is not None, f"`pavedock {name}` has no --url"
        assert "--url" in url.opts and url.envvar == "PAVEDOCK_URL", name


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("PAVEDOCK_URL", "PAVEDOCK_HOST", "PAVEDOCK_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PAVEDOCK_DATA_DIR", str(tmp_path / "var"))
    (tmp_path / "var").mkdir()
    return tmp_path / "var"


def test_the_default_is_where_serve_listens(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_dock_url() == "http://127.0.0.1:8000"
    monkeypatch.setenv("PAVEDOCK_PORT", "8123")
    assert default_dock_url() == "http://127.0.0.1:8123"
    monkeypatch.setenv("PAVEDOCK_HOST", "0.0.0.0")  # bound everywhere: reached on loopback
    assert default_dock_url() == "http://127.0.0.1:8123"
    monkeypatch.setenv("PAVEDOCK_URL", "http://dock.example:9000/")
    assert default_dock_url() == "http://dock.example:9000"


def test_a_running_serve_is_found_by_its_record(clean_env: Path) -> None:
    # A stand-in for `pavedock serve` (its command line names serve) records where it listens.
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", "serve"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Started, not just forked: Popen may return while the kernel is still setting up the
        # new program, when /proc/PID/cmdline reads empty (seen with a large pytest process).
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        (clean_env / "serve.json").write_text(json.dumps({"url": "http://127.0.0.1:8555", "pid": server.pid}))
        assert running_serve_url(clean_env) == "http://127.0.0.1:8555"
        assert default_dock_url() == "http://127.0.0.1:8555"
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
    # A record whose pid now belongs to another program is ignored.
    record_serve_url(clean_env, serve_url("127.0.0.1", 8557))  # this process: pytest, no dock
    assert running_serve_url(clean_env) is None
    # A record left by a serve that died (SIGKILL) is ignored.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (clean_env / "serve.json").write_text(
        json.dumps({"url": "http://127.0.0.1:8556", "pid": int(dead.stdout)})
    )
    assert running_serve_url(clean_env) is None
    assert default_dock_url() == "http://127.0.0.1:8000"


def test_the_cli_help_shows_the_default_it_will_use(clean_env: Path) -> None:
    env = {**os.environ, "PAVEDOCK_PORT": "8777", "COLUMNS": "200"}
    env.pop("PAVEDOCK_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "submit", "--help"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "http://127.0.0.1:8777" in out.stdout and "PAVEDOCK_URL" in out.stdout


def test_flowers_port_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAVEDOCK_FLOWER_PORT", "5601")
    settings = Settings()
    assert settings.flower_url == "http://127.0.0.1:5601"  # the /admin link follows it
    command = flower_command(settings)
    assert command is not None and "--port=5601" in command
    assert Settings(flower_url="http://localhost:5555/flower", flower_port=5602).flower_url == (
        "http://localhost:5602/flower"
    )


def test_the_demo_markets(datasets_dir: Path) -> None:
    """`pavedock demo`'s small market is its five; the wide one is one learnware per text dataset,
    transformers classifiers and TF-IDF models in turn; another name is refused with the choices."""
    from app.cli.demo import MARKET, market_entries
    from app.ml.data import text_task_names

    assert market_entries(datasets_dir, "small") == MARKET
    wide = market_entries(datasets_dir, "wide")
    assert [name for name, _ in wide] == text_task_names(datasets_dir) and len(wide) >= 20
    assert {family for _, family in wide} == {"linear", "tfidf"}
    assert all(a != b for (_, a), (_, b) in pairwise(wide))
    with pytest.raises(SystemExit, match="choose one of small, wide"):
        market_entries(datasets_dir, "huge")
