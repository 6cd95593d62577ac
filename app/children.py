"""Child processes that end with the process that started them."""

from __future__ import annotations

import sys


def die_with_parent() -> None:
    """In a child, before it runs: get SIGTERM when its parent dies, even by SIGKILL (Linux; a
    no-op elsewhere). For ``subprocess.Popen(preexec_fn=...)``: a worker or Flower started by
    ``pavedock serve`` never outlives it, whatever ends it."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
