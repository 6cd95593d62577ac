"""Where the dock is, and how to write a ``pavedock`` command the user can paste.

Every client command takes ``--url`` (or ``PAVEDOCK_URL``); without either, it goes where
``pavedock serve`` listens with the same environment: ``PAVEDOCK_HOST`` and ``PAVEDOCK_PORT``
(default ``http://127.0.0.1:8000``). So ``PAVEDOCK_PORT=8100`` in one shell serves and finds
the dock on 8100; from another machine or shell, ``PAVEDOCK_URL`` says where it is.
"""

from __future__ import annotations

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


def default_dock_url() -> str:
    """``PAVEDOCK_URL`` if set, else where ``pavedock serve`` listens under these settings."""
    explicit = os.environ.get("PAVEDOCK_URL")
    if explicit:
        return explicit.rstrip("/")
    from app.settings import Settings

    try:
        settings = Settings()
    except ValueError:  # a bad unrelated setting must not break the client; serve will say why
        return "http://127.0.0.1:8000"
    return serve_url(settings.host, settings.port)


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
