"""docs/packages.md, followed literally: every ``bash`` and ``python`` block of it runs, in
order, in one empty folder, against ``pavedock serve``; each example's learnware ends ready."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.client import DockClient
from tests.e2e.conftest import ROOT, Processes, start_embedded

pytestmark = pytest.mark.e2e

DOC = ROOT / "docs" / "packages.md"


def blocks(text: str) -> list[tuple[str, str]]:
    """The document's fenced code blocks as (language, code), in order."""
    return [(lang, code) for lang, code in re.findall(r"^```(\w+)\n(.*?)^```$", text, re.S | re.M)]


def test_the_packages_doc_runs_as_written(processes: Processes, tmp_path: Path) -> None:
    dock = start_embedded(processes, tmp_path)
    developer = dock.key("developer")
    work = tmp_path / "developer"
    work.mkdir()
    # What the page asks for: the dock's venv first on the PATH, PAVEDOCK_URL and a developer key.
    env = {
        **dock.env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PAVEDOCK_URL": dock.url,
        "PAVEDOCK_API_KEY": developer,
        "PYTHONPATH": str(ROOT),
    }
    runnable = [
        (lang, code) for lang, code in blocks(DOC.read_text(encoding="utf-8")) if lang in ("bash", "python")
    ]
    assert sum(1 for lang, code in runnable if "pavedock submit" in code) == 5  # one per format
    timings: list[str] = []  # how long each step of the page takes, printed with -s
    for number, (lang, code) in enumerate(runnable, start=1):
        if lang == "bash":
            args = ["bash", "-euo", "pipefail", "-c", code]
        else:
            script = work / f"block{number}.py"
            script.write_text(code)
            args = [sys.executable, script.name]
        started = time.perf_counter()
        result = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=900)
        timings.append(
            f"block {number:2} ({lang}) {time.perf_counter() - started:6.1f} s  {code.splitlines()[0][:60]}"
        )
        assert result.returncode == 0, (
            f"block {number} ({lang}) failed:\n{code}\n--- stdout\n{result.stdout}\n--- stderr\n"
            f"{result.stderr[-4000:]}\n--- dock\n{dock.serve.tail()}"
        )
        if "pavedock submit" in code:
            assert ": ready" in result.stdout, result.stdout
    print("\n".join(timings))
    with DockClient(dock.url, developer) as client:
        mine = client.learnwares(mine=True).items
    assert sorted(lw.model_format for lw in mine) == [
        "hf-seqcls",
        "onnx",
        "onnx",
        "peft-lora",
        "pooled-linear",
    ]
    assert {lw.status.value for lw in mine} == {"ready"}
    assert all(lw.weights_sha256 for lw in mine)
