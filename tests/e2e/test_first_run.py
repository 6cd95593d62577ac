"""The README's first screen on a non-default port, in its own words: ``PAVEDOCK_PORT=N make run``,
``pavedock keys create --role admin``, ``pavedock demo`` with ``PAVEDOCK_URL``; then the
commands the demo suggests, run exactly as it prints them, and a client command that finds the
dock with no URL at all. The first screen holds none of the third-party noise issue 12 saw."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from app.bench.builders import train_linear_head_learnware
from app.ml.data import load_task
from tests.conftest import cached
from tests.e2e.conftest import PYTHON, ROOT, TEST_ENV, Proc, Processes, free_port, wait_ready

pytestmark = pytest.mark.e2e

NOISE = (
    "SetuptoolsDeprecationWarning",
    "as a TOML table is deprecated",
    "superuser privileges",
    "No hostname was supplied",
    "LOAD REPORT",
    "newly initialized",
    "Inspect method",
    "Loading weights",
    "is_gradient_checkpointing",
    "Traceback",
    "ModuleNotFoundError",  # faiss's loader trying its AVX builds, at INFO
    "setup plugin",  # alembic's plugin registry, at INFO
)


@pytest.fixture(scope="session")
def demo_linear_packages(datasets_dir: Path, package_dir: Path) -> dict[str, Path]:
    """The demo's two MiniLM linear heads, trained smaller than the demo would (the slow part);
    its TF-IDF learnwares the demo trains itself."""

    def linear(name: str) -> Path:
        return cached(
            package_dir / f"{name}-linear-demo.zip",
            lambda out: train_linear_head_learnware(
                load_task(datasets_dir, name, "train", limit=400, seed=0), out, max_examples=400, n_inputs=128
            ),
        )

    return {"ag_news": linear("ag_news"), "sms_spam": linear("sms_spam")}


def run(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 1500
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_the_readme_first_screen_on_another_port(
    processes: Processes, tmp_path: Path, datasets_dir: Path, demo_linear_packages: dict[str, Path]
) -> None:
    port = free_port()
    pavedock = [PYTHON, "-m", "app.cli.main"]
    env = {
        **os.environ,
        **TEST_ENV,
        "PAVEDOCK_DATA_DIR": str(tmp_path / "var"),
        "PAVEDOCK_DATASETS_DIR": str(datasets_dir),
    }
    env["PAVEDOCK_SERVE_FLOWER"] = "true"  # the first screen as `make run` shows it, Flower included
    env["PAVEDOCK_FLOWER_PORT"] = str(free_port())
    for var in (
        "PAVEDOCK_LOG_LEVEL",  # the first screen at the dock's own levels, as a newcomer sees it
        "PAVEDOCK_URL",
        "PAVEDOCK_PORT",
        "PAVEDOCK_API_KEY",
        "PAVEDOCK_DATABASE_URL",
        "PAVEDOCK_BROKER_URL",
    ):
        env.pop(var, None)
    # `PAVEDOCK_PORT=N make run`, the Makefile's own recipe. Its install step is what `make test`
    # (or CI, on a fresh clone) did before the tests ran: a stamp newer than pyproject.toml and
    # requirements.lock tells make so, and VENV names the environment the tests run in.
    stamp = tmp_path / "installed-stamp"
    stamp.touch()
    venv = Path(PYTHON).parent.parent
    make_run = ["make", "--no-print-directory", "run", f"VENV={venv}", f"STAMP={stamp}"]
    # `make -q` runs no recipe: were the install step not up to date, this fails rather than
    # letting `make run` reinstall into the tests' environment.
    assert subprocess.run([*make_run[:2], "-q", "install", *make_run[3:]], cwd=ROOT).returncode == 0
    serve = processes.start(
        Proc(
            "make run",
            make_run,
            {**env, "PAVEDOCK_PORT": str(port), "PYTHONPATH": str(ROOT)},
            tmp_path / "serve.log",
        )
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, serve)

    admin = run([*pavedock, "keys", "create", "--role", "admin"], env, ROOT)
    assert admin.returncode == 0, admin.stderr
    # `pavedock demo` in another shell, told where the dock is; its trained packages are cached
    # under .cache/pavedock/demo of the folder it runs in, seeded here with the slow ones.
    shell = tmp_path / "shell"
    cache = shell / ".cache" / "pavedock" / "demo"
    cache.mkdir(parents=True)
    for name, package in demo_linear_packages.items():
        (cache / f"{name}-linear.zip").write_bytes(package.read_bytes())
    user_env = {**env, "PAVEDOCK_URL": url, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    demo = run([*pavedock, "demo"], user_env, shell)
    assert demo.returncode == 0, f"{demo.stdout}\n{demo.stderr}\n{serve.tail()}"
    out = demo.stdout
    print(out)  # shown when the test fails
    assert out.count(": indexed") == 5, out
    top = next(line for line in out.splitlines() if line.startswith("│ 1 "))
    columns = [cell.strip() for cell in top.split("│")[1:-1]]  # rank, id, score, shots, name, …
    assert columns[4].startswith("ag_news"), out
    assert "Order: matches checked on your examples" in out
    assert re.search(r"developer +pdk_\S+\n +submits packages", out) and re.search(
        r"user +pdk_\S+\n +posts tasks", out
    )

    # The suggested commands, exactly as printed, in that shell.
    suggested = out[out.index("Try it yourself") :].splitlines()[1:]
    lines = [line.strip() for line in suggested if line.startswith("  ")]
    assert lines[0].startswith("export PAVEDOCK_URL=") and any(" task " in line for line in lines)
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    tried = run(["bash", "-c", script], user_env, shell)
    assert tried.returncode == 0, f"{script}\n{tried.stdout}\n{tried.stderr}"
    assert "Order: matches checked on your examples" in tried.stdout  # the task's ranking
    assert list(shell.glob("learnware-*.zip")), tried.stdout

    # No URL at all: a client in the same checkout finds the running `pavedock serve --port N`.
    token = admin.stdout.strip().splitlines()[-1]
    listed = run([*pavedock, "learnwares", "--key", token], {**env, "PYTHONPATH": str(ROOT)}, ROOT)
    assert listed.returncode == 0, listed.stderr
    assert "5 in all" in listed.stdout

    first_screen = serve.log.read_text(errors="replace") + demo.stdout + demo.stderr
    for noise in NOISE:
        assert noise not in first_screen, f"{noise!r} on the first screen:\n{first_screen[-3000:]}"
