"""The first run is readable: third-party messages that tell the user nothing do not appear."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.quiet import running_as_root, worker_env
from app.ml.data import TextTask
from app.settings import Settings


@pytest.mark.real_model
def test_a_linear_learnware_is_built_without_a_load_report(
    tiny_task: TextTask, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The head is set from the regression, so no "classifier.weight MISSING … newly initialized"."""
    from app.bench.builders import train_linear_head_learnware
    from app.ml.packages import extract_package
    from app.ml.runners import load_runner

    caplog.set_level(logging.INFO)
    package = train_linear_head_learnware(tiny_task, tmp_path / "lw.zip", max_examples=60, n_inputs=32)
    out, err = capfd.readouterr()
    for noise in ("LOAD REPORT", "newly initialized", "MISSING"):
        assert noise not in out + err + caplog.text
    runner = load_runner(extract_package(package, tmp_path / "lw"))
    accuracy = (runner.predict(tiny_task.texts).labels == tiny_task.labels).mean()
    assert accuracy > 0.9  # the head is the trained regression, not a random one


def test_the_embedded_broker_names_its_host(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    from kombu import Connection

    caplog.set_level(logging.WARNING, logger="kombu")
    url = Settings(environment="testing", data_dir=tmp_path).resolved_broker_url
    with Connection(
        url, transport_options={"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path)}
    ) as c:
        assert c.info()["hostname"] == "localhost"
        c.as_uri()
    assert "No hostname was supplied" not in caplog.text


@pytest.mark.skipif(not running_as_root(), reason="Celery warns about superuser privileges only as root")
def test_the_embedded_worker_is_spared_celerys_superuser_block() -> None:
    check = "from celery.platforms import check_privileges; check_privileges({'json'})"
    plain = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert "superuser privileges" in plain.stderr  # what Celery says as root
    quiet = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=worker_env())
    assert quiet.returncode == 0 and "superuser" not in quiet.stderr, quiet.stderr
    # A worker that accepted pickle would still be refused: the filter hides a warning, not an error.
    pickled = "from celery.platforms import check_privileges; check_privileges({'pickle'})"
    refused = subprocess.run(
        [sys.executable, "-c", pickled], capture_output=True, text=True, env=worker_env()
    )
    assert refused.returncode != 0 and "SecurityError" in refused.stderr
