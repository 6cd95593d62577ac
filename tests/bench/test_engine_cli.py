"""``pavedock bench engine``: the pgvector benchmark's options, checked before any work starts
(the run itself needs a pgvector server and the real task specs; docs/benchmarks/scale.md)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from app.cli.main import app


def test_the_engine_benchmark_is_a_command_of_the_cli() -> None:
    result = CliRunner().invoke(app, ["bench", "engine", "--help"])
    assert result.exit_code == 0
    assert all(option in result.output for option in ("--url", "--size", "--index", "--ef", "--out"))


def test_bad_options_are_refused_by_name(tmp_path: Path) -> None:
    out = tmp_path / "engine.json"
    runner = CliRunner()
    index = runner.invoke(
        app, ["bench", "engine", "--url", "postgresql://x", "--out", str(out), "--index", "flat"]
    )
    assert index.exit_code == 2 and "--index" in index.output and "'flat' is not one of" in index.output
    ef = runner.invoke(
        app, ["bench", "engine", "--url", "postgresql://x", "--out", str(out), "--ef", "100,many"]
    )
    assert ef.exit_code == 2 and "--ef" in ef.output and "not a comma-separated list" in ef.output
    assert not out.exists()
