"""A first run a newcomer can read: third-party warnings that tell the user nothing, filtered.

Each filter is for one known message, with the reason it says nothing here; anything else
still shows.

- Celery's "You're running the worker with superuser privileges" (``SecurityWarning``) when
  ``pavedock serve`` runs as root, as it does in a container or a fresh VM. Celery warns because
  a root worker that accepts pickled messages would run whatever a broker client sends; the
  dock's workers accept JSON only (``workers/celery_app.py``), and Celery itself refuses to start
  a root worker that accepts pickle. ``serve`` says so in one line instead of Celery's block.
  Production runs workers as an ordinary user (the Docker images do).
- In the worker, transformers' "Loading weights" progress bars (one per model it loads, written
  into the worker's log as warnings) and its ``is_gradient_checkpointing`` FutureWarning (an
  internal deprecation peft triggers): the worker's own log lines say what it loads and why.
- Flower's "Inspect method … failed" at start, when it asks workers that are still starting:
  Flower runs at ``--logging=error`` (``app/admin/flower.py``) and retries on its own.
"""

from __future__ import annotations

import os

from rich.console import Console

# Python's -W syntax: action:message-start:category (the message is matched case-insensitively).
ROOT_WORKER_WARNING = "ignore:You're running the worker with superuser privileges:UserWarning"
CHECKPOINTING_WARNING = "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def worker_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The embedded worker's environment: this one, with the filters above."""
    env = dict(os.environ if base is None else base)
    filters = [env.get("PYTHONWARNINGS", ""), CHECKPOINTING_WARNING]
    if running_as_root():
        filters.append(ROOT_WORKER_WARNING)
    env["PYTHONWARNINGS"] = ",".join(f for f in filters if f)
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars follow this too
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
