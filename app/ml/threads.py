"""How many threads torch may use in this process on a CPU-only host.

The process's settings say (``PAVEDOCK_TORCH_THREADS``); the runtime and the CLI hand their
settings' value over with ``use_torch_threads``, and ``encoders.configure_threads`` applies it
when a model loads. Nothing here imports torch, so a process sets it before loading anything.
"""

from __future__ import annotations

_threads: int | None = None


def use_torch_threads(threads: int | None) -> None:
    """Let torch use ``threads`` threads (None: every core), from the next model this process loads."""
    global _threads
    _threads = threads


def torch_threads() -> int | None:
    return _threads
