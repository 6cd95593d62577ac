"""Real processes for the end-to-end tests: uvicorn, Celery workers, ``pavedock serve``.

Each process runs in its own process group (so a test can SIGKILL a worker with its pool
children, as a crash would) and logs to a file under the test's folder; a failing test prints
the tails of those logs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import cached

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

# Fast failure detection for the tests; production defaults are minutes.
TEST_ENV = {
    "PAVEDOCK_JOB_HEARTBEAT_S": "1",
    "PAVEDOCK_JOB_STALE_AFTER_S": "8",
    "PAVEDOCK_REAPER_INTERVAL_S": "2",
    "PAVEDOCK_JOB_REDISPATCH_AFTER_S": "60",
    "PAVEDOCK_SPEC_FIT_INPUTS": "128",
    "PAVEDOCK_VALIDATION_INPUTS": "128",
    "PAVEDOCK_INDEX_SAVE_INTERVAL_S": "0",
    "PAVEDOCK_LOG_LEVEL": "INFO",
    "PAVEDOCK_SERVE_FLOWER": "false",  # the browser test covers Flower
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # API and workers share the cores with the test process: one torch thread each.
    "OMP_NUM_THREADS": "1",
    "PAVEDOCK_TORCH_THREADS": "1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc:
    """A child process in its own group, logging to ``log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path):
        self.name = name
        self.args = args
        self.env = env
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        out.write(f"\n==== start {' '.join(self.args)}\n".encode())
        out.flush()
        self.popen = subprocess.Popen(
            self.args, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        """Signal every process of the group, the leader's children too even if it has exited."""
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole group (the process and its pool children), like a crash."""
        self.signal_group(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=30)

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM, then SIGKILL if it does not stop in time."""
        if not self.alive:
            return
        assert self.popen is not None
        self.signal_group(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.signal_group(signal.SIGKILL)  # stragglers of the group

    def tail(self, lines: int = 40) -> str:
        if not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class Processes:
    def __init__(self) -> None:
        self.all: list[Proc] = []

    def start(self, proc: Proc) -> Proc:
        self.all.append(proc)
        return proc.start()

    def stop_all(self) -> None:
        for proc in reversed(self.all):
            proc.stop(timeout=20)

    def report(self) -> str:
        return "\n\n".join(f"---- {p.name} ({p.log})\n{p.tail()}" for p in self.all)


@pytest.fixture
def processes(request: pytest.FixtureRequest) -> Iterator[Processes]:
    procs = Processes()
    yield procs
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(procs.report())
    procs.stop_all()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def wait_ready(url: str, proc: Proc, timeout: float = 240.0) -> dict[str, object]:
    """Poll /readyz until it says ready (fail early if the process died)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not proc.alive:
            raise AssertionError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            response = httpx.get(f"{url}/readyz", timeout=5)
            if response.status_code == 200:
                body: dict[str, object] = response.json()
                return body
            last = response.text
        except httpx.TransportError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise AssertionError(f"{proc.name} not ready after {timeout:.0f} s: {last}\n{proc.tail()}")


def uvicorn_proc(name: str, env: dict[str, str], port: int, log: Path) -> Proc:
    return Proc(
        name,
        [
            PYTHON,
            "-m",
            "uvicorn",
            "app.main:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env,
        log,
    )


def worker_proc(name: str, env: dict[str, str], queues: str, log: Path) -> Proc:
    return Proc(
        name,
        [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "workers.main",
            "worker",
            "--queues",
            queues,
            "--concurrency",
            "1",
            "--hostname",
            f"{name}@%h",
            "--loglevel",
            "INFO",
        ],
        env,
        log,
    )


@pytest.fixture(scope="session")
def minilm_packages(datasets_dir: Path, package_dir: Path) -> dict[str, Path]:
    """Three real learnwares on the MiniLM base, for three datasets with different label sets:
    linear heads (hf-seqcls) for ag_news and trec, a short LoRA adapter (peft-lora) for sst2."""
    from app.bench.builders import train_linear_head_learnware, train_lora_learnware
    from app.ml.data import load_task

    def linear(name: str) -> Callable[[Path], Path]:
        return lambda out: train_linear_head_learnware(
            load_task(datasets_dir, name, "train", limit=400, seed=0), out, max_examples=400, n_inputs=128
        )

    def lora(name: str) -> Callable[[Path], Path]:
        return lambda out: train_lora_learnware(
            load_task(datasets_dir, name, "train", limit=400, seed=0), out, steps=20, n_inputs=128
        )

    return {
        "ag_news": cached(package_dir / "ag_news-linear.zip", linear("ag_news")),
        "trec": cached(package_dir / "trec-linear.zip", linear("trec")),
        "sst2": cached(package_dir / "sst2-lora.zip", lora("sst2")),
    }


def pavedock(env: dict[str, str], *args: str) -> str:
    """Run the CLI as a user would; its stdout (fails the test on a non-zero exit)."""
    result = subprocess.run(
        [PYTHON, "-m", "app.cli.main", *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@dataclass
class EmbeddedDock:
    """``pavedock serve`` (API, worker, SQLite, filesystem broker) under one data folder."""

    url: str
    env: dict[str, str]
    serve_args: list[str]
    serve: Proc
    ready: dict[str, object]

    def key(self, role: str) -> str:
        return pavedock(self.env, "keys", "create", "--role", role).strip().splitlines()[-1]


def start_embedded(processes: Processes, tmp_path: Path, data_dir: Path | None = None) -> EmbeddedDock:
    port = free_port()
    env = {**os.environ, **TEST_ENV, "PAVEDOCK_DATA_DIR": str(data_dir or tmp_path / "var"),
           "PAVEDOCK_DATABASE_URL": "", "PAVEDOCK_BROKER_URL": ""}  # fmt: skip
    args = [PYTHON, "-m", "app.cli.main", "serve", "--port", str(port)]
    serve = processes.start(Proc("serve", args, env, tmp_path / "serve.log"))
    url = f"http://127.0.0.1:{port}"
    return EmbeddedDock(url, env, args, serve, wait_ready(url, serve))
