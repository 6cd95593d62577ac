"""Flower, Celery's own dashboard, started beside ``pavedock serve`` (``make run``).

It listens where ``PAVEDOCK_FLOWER_URL`` says (the link on ``/admin``), so the two never
disagree. Flower has no sign-in of its own: it is started only on a loopback address; anywhere
else, run it behind an authenticating proxy (docker-compose.yml has a service for it).
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from app.children import die_with_parent
from app.settings import Settings

log = logging.getLogger(__name__)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class FlowerProcess:
    """A running Flower; stopped by ``stop()`` or when this process exits."""

    def __init__(
        self, url: str, command: list[str], env: dict[str, str] | None = None, log_path: Path | None = None
    ):
        self.url = url
        self.command = command
        # Flower's own log (its inspector reports every worker it cannot reach yet) goes to a file,
        # not the terminal `pavedock serve` speaks to.
        output = log_path.open("ab") if log_path is not None else None
        self.proc = subprocess.Popen(
            command,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
            preexec_fn=die_with_parent,  # gone with the dock even where atexit never runs (SIGKILL)
        )
        if output is not None:
            output.close()  # the child holds its own descriptor
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        atexit.unregister(self.stop)


def flower_command(settings: Settings) -> list[str] | None:
    """Flower's command line for ``settings.flower_url``; None when it is not ours to start
    (switched off, no URL, or a URL that is not on this machine's loopback)."""
    if not settings.serve_flower or not settings.flower_url:
        return None
    url = urlsplit(settings.flower_url)
    host = url.hostname or ""
    if not _loopback(host):
        return None
    port = url.port or (443 if url.scheme == "https" else 80)
    command = [
        sys.executable, "-m", "celery", "-A", "workers.main", "flower",
        # Errors only: at start Flower asks workers that are still starting about themselves and
        # warns "Inspect method … failed" for each question, then asks again on its own.
        f"--address={host}", f"--port={port}", "--logging=error",
        # The embedded broker polls its folders: answers take a second or two, over Flower's 1 s.
        f"--inspect_timeout={settings.worker_inspect_timeout_s * 1000:.0f}",
    ]  # fmt: skip
    prefix = url.path.strip("/")
    if prefix:
        command.append(f"--url_prefix={prefix}")
    return command


def start_flower(
    settings: Settings, env: dict[str, str] | None = None, log_path: Path | None = None
) -> FlowerProcess | None:
    """Start Flower for ``pavedock serve`` (see ``flower_command``); None when it is not started.
    ``env``: Flower's environment (default: this process's), where it reads the broker URL;
    ``log_path``: where its output goes (default: this process's terminal)."""
    command = flower_command(settings)
    if command is None:
        if settings.serve_flower and settings.flower_url:
            log.warning("Flower not started: %s is not a loopback address", settings.flower_url)
        return None
    log.info("starting Flower at %s", settings.flower_url)
    return FlowerProcess(settings.flower_url, command, env=env, log_path=log_path)
