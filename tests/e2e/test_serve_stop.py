"""``pavedock serve`` ended by SIGTERM (``kill``, ``docker stop``, systemd) leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Processes, free_port, start_embedded

pytestmark = pytest.mark.e2e


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_the_worker_and_flower_and_forgets_the_url(
    processes: Processes, tmp_path: Path
) -> None:
    """uvicorn raises SIGTERM again after its graceful shutdown; under Python's default handler
    that ended the process before its cleanup, leaving Flower running (the next `serve` could not
    bind its port) and the URL file pointing at nothing. Only the serve process is signalled, as
    an operator's ``kill`` does, not its process group."""
    flower_port = free_port()
    dock = start_embedded(
        processes,
        tmp_path,
        extra_env={"PAVEDOCK_SERVE_FLOWER": "true", "PAVEDOCK_FLOWER_URL": f"http://127.0.0.1:{flower_port}"},
    )
    served = tmp_path / "var" / "serve.json"
    assert served.is_file()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # Flower answers once it has started
        try:
            if httpx.get(f"http://127.0.0.1:{flower_port}/", timeout=2).status_code < 500:
                break
        except httpx.TransportError:
            time.sleep(0.5)
    else:
        pytest.fail(f"Flower did not answer on {flower_port}\n{dock.serve.tail()}")
    popen = dock.serve.popen
    assert popen is not None

    os.kill(popen.pid, signal.SIGTERM)
    try:
        code = popen.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve did not stop on SIGTERM\n{dock.serve.tail()}")

    assert code == 128 + signal.SIGTERM, dock.serve.tail()
    assert not served.exists()
    deadline = time.monotonic() + 30
    while _group_alive(popen.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _group_alive(popen.pid), "a child of serve outlived it"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{flower_port}/", timeout=2)
