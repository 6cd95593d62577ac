"""A real redis-server of a test's own, on a free port, that a test can stop and start again
(an outage). Its data is kept in an append-only file, as a production Redis keeps it, so a
restart loses nothing that was acknowledged."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    def __init__(self, folder: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed")
        self.binary = binary
        self.folder = folder
        self.port = _free_port()
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, timeout: float = 20.0) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        args += ["--save", "", "--appendonly", "yes", "--appendfsync", "always", "--logfile", "redis.log"]
        self.popen = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError(f"redis-server on port {self.port} did not answer in {timeout:.0f} s")

    def stop(self) -> None:
        """Shut down (SIGTERM: the append-only file is flushed first) and wait."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            self.popen.wait(timeout=20)
        self.popen = None
