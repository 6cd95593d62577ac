"""Where the dock is, and how to write a ``pavedock`` command the user can paste.

Every client command takes ``--url`` (or ``PAVEDOCK_URL``). Without either it goes where
``pavedock serve`` listens: the URL a running ``pavedock serve`` of the same data folder wrote
to ``<data_dir>/serve.json`` (so ``pavedock serve --port 8100`` is found from another shell of
the same checkout), else ``PAVEDOCK_HOST`` and ``PAVEDOCK_PORT`` (``http://127.0.0.1:8000``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

URL_HELP = "the dock's base URL (default: where `pavedock serve` listens, from PAVEDOCK_HOST / PAVEDOCK_PORT)"


def serve_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a dock bound to ``host``:``port``."""
    if host in ("0.0.0.0", "::", ""):  # bound to every interface: reach it on loopback
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


SERVE_FILE = "serve.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def record_serve_url(data_dir: Path, url: str) -> Path:
    """Written by ``pavedock serve`` once it knows its port; removed when it stops."""
    path = data_dir / SERVE_FILE
    path.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    return path


def running_serve_url(data_dir: Path) -> str | None:
    """The URL of a live ``pavedock serve`` over ``data_dir``, if one recorded it."""
    try:
        record = json.loads((data_dir / SERVE_FILE).read_text())
        url, pid = str(record["url"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(pid):
        return None
    cmdline = Path(f"/proc/{pid}/cmdline")  # Linux: a pid reused by another program is no dock
    if cmdline.exists():
        with contextlib.suppress(OSError):
            if b"serve" not in cmdline.read_bytes():
                return None
    return url


def default_dock_url() -> str:
    """``PAVEDOCK_URL`` if set, else where ``pavedock serve`` listens (see the module's doc)."""
    explicit = os.environ.get("PAVEDOCK_URL")
    if explicit:
        return explicit.rstrip("/")
    from app.settings import Settings

    try:
        settings = Settings()
    except ValueError:  # a bad unrelated setting must not break the client; serve will say why
        return "http://127.0.0.1:8000"
    return running_serve_url(settings.data_dir) or serve_url(settings.host, settings.port)


def forget_serve_url(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def pavedock_command() -> str:
    """How to run ``pavedock`` from the current folder, as it is being run now.

    ``pavedock`` when the running one is on the PATH; otherwise its path (``.venv/bin/pavedock``
    from a checkout where ``make run`` made the venv), so a printed command runs as printed.
    """
    script = Path(sys.executable).parent / "pavedock"
    on_path = shutil.which("pavedock")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "pavedock"
    if not script.exists():
        return "pavedock"
    try:
        relative = Path(os.path.relpath(script, Path.cwd()))
    except ValueError:  # another drive (Windows)
        return str(script)
    return str(relative) if not str(relative).startswith("..") else str(script)
