"""A real dock for the browser: uvicorn and a Celery worker as processes, on a migrated SQLite
database and the embedded broker in a temporary folder; headless Chromium driven by Selenium
with the system's chromedriver (nothing is downloaded)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.admin.flower import FlowerProcess, start_flower
from app.auth.service import create_key
from app.db.migrate import upgrade
from app.db.models import Role
from app.db.session import Database
from app.runtime import Runtime
from app.settings import Settings

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WORKER_NAME = "browser-worker@dock"


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all held open while they are chosen)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass
class Dock:
    url: str
    runtime: Runtime
    admin: str
    developer: str
    logs: Path
    flower: str
    user: str = ""
    user2: str = ""

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def _wait_ready(url: str, procs: list[subprocess.Popen[bytes]], logs: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}; see {logs}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the dock was not ready in {timeout} s; see {logs}")


@pytest.fixture(scope="module")
def dock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dock]:
    """The admin dashboard's dock: review required, Flower beside it."""
    with running_dock(tmp_path_factory.mktemp("dock"), review_required=True, with_flower=True) as running:
        yield running


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dock]:
    """The web pages' dock: learnwares are indexed once validated (no review), no Flower."""
    with running_dock(tmp_path_factory.mktemp("market"), review_required=False, with_flower=False) as running:
        yield running


@contextmanager
def running_dock(root: Path, *, review_required: bool, with_flower: bool) -> Iterator[Dock]:
    port, flower_port = free_ports(2)
    database_url = f"sqlite:///{root / 'dock.sqlite'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAVEDOCK_")}
    env.update(
        {
            "PAVEDOCK_ENVIRONMENT": "testing",
            "PAVEDOCK_DATA_DIR": str(root / "var"),
            "PAVEDOCK_DATABASE_URL": database_url,
            "PAVEDOCK_REVIEW_REQUIRED": "true" if review_required else "false",
            # The service-layer "running" job must not be reaped while the test looks at it.
            "PAVEDOCK_JOB_STALE_AFTER_S": "600",
            "PAVEDOCK_ADMIN_SAMPLE_INTERVAL_S": "1",
            "PAVEDOCK_WORKER_INSPECT_INTERVAL_S": "2",
            "PAVEDOCK_FLOWER_URL": f"http://127.0.0.1:{flower_port}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    settings = Settings(
        environment="testing",
        data_dir=root / "var",
        database_url=database_url,
        review_required=review_required,
        job_stale_after_s=600,
    )
    settings.ensure_dirs()
    upgrade(database_url)
    db = Database(database_url)
    with db.session() as session:
        admin = create_key(session, role=Role.admin, name="browser admin").token
        developer = create_key(session, role=Role.developer, name="browser developer").token
        user = create_key(session, role=Role.user, name="browser user").token
        user2 = create_key(session, role=Role.user, name="another user").token
    db.dispose()

    logs = root / "logs"
    logs.mkdir()

    def start(name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as out:
            return subprocess.Popen(
                command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    api = start(
        "api",
        [
            sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        ],
    )  # fmt: skip
    worker = start(
        "worker",
        [
            sys.executable, "-m", "celery", "-A", "workers.main", "worker",
            "--queues", "gpu,cpu", "--concurrency", "1", "--hostname", WORKER_NAME, "--loglevel", "INFO",
        ],
    )  # fmt: skip
    runtime: Runtime | None = None
    flower: FlowerProcess | None = None
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, [api, worker], logs)
        # As `pavedock serve` does: Flower where the dashboard links to. Started once the dock is
        # up (three processes importing torch at once on two cores is slower than in turn); the
        # test looks at it last.
        if with_flower:
            flower = start_flower(Settings(flower_url=env["PAVEDOCK_FLOWER_URL"]), env=env)
            assert flower is not None
        runtime = Runtime.create(settings, persist_index=False)
        yield Dock(
            url=url,
            runtime=runtime,
            admin=admin,
            developer=developer,
            logs=logs,
            flower=flower.url if flower else "",
            user=user,
            user2=user2,
        )
    finally:
        # The worker's pool is killed with it: a warm (or even a cold) Celery shutdown waits
        # seconds on the broker's polling, and nothing of this dock outlives the test.
        os.killpg(worker.pid, signal.SIGKILL)
        api.terminate()
        if flower is not None:
            flower.proc.kill()  # Tornado takes seconds to stop on SIGTERM; nothing to save here
            flower.stop()
        for proc in (api, worker):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if runtime is not None:
            runtime.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1440,1000", "--force-device-scale-factor=1",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors, for CSP checks
    # Downloads land in the test's own folder, without a prompt (see the ``downloads`` fixture).
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(tmp_path / "downloads"), "download.prompt_for_download": False},
    )
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def downloads(tmp_path: Path) -> Path:
    """Where the ``browser`` fixture's Chromium saves downloads."""
    folder = tmp_path / "downloads"
    folder.mkdir(exist_ok=True)
    return folder
