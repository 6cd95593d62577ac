"""A first run a newcomer can read: third-party warnings that tell the user nothing, filtered.

Each filter is for one known message, with the reason it says nothing here; anything else
still shows.

- Celery's "You're running the worker with superuser privileges" (``SecurityWarning``) when
  ``pavedock serve`` runs as root, as it does in a container or a fresh VM. Celery warns because
  a root worker that accepts pickled messages would run whatever a broker client sends; the
  dock's workers accept JSON only (``workers/celery_app.py``), and Celery itself refuses to start
  a root worker that accepts pickle. ``serve`` says so in one line instead of Celery's block.
  Production runs workers as an ordinary user (the Docker images do).
"""

from __future__ import annotations

import os

from rich.console import Console

# Python's -W syntax: action:message-start:category (the message is matched case-insensitively).
ROOT_WORKER_WARNING = "ignore:You're running the worker with superuser privileges:UserWarning"


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def worker_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The embedded worker's environment: this one, with Celery's root warning filtered."""
    env = dict(os.environ if base is None else base)
    if running_as_root():
        env["PYTHONWARNINGS"] = ",".join(w for w in (env.get("PYTHONWARNINGS"), ROOT_WORKER_WARNING) if w)
    return env


def explain_root(console: Console) -> None:
    """One line where Celery would print its superuser block."""
    if running_as_root():
        console.print(
            "running as root: the embedded worker accepts JSON messages only (never pickle), so "
            "Celery's superuser warning is silenced here; in production run workers as a normal user",
            style="dim",
            soft_wrap=True,
        )
