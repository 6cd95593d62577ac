"""The PACT sweep end to end on the smoke profile: real MiniLM adapters, real datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.bench.pact_sweep import PACT_SETTINGS, SWEEP_METHODS, run_pact_sweep

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.real_model
def test_pact_sweep_reports_every_setting_beside_the_merger_without_pact(
    datasets_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep.json"
    result = run_pact_sweep(
        "smoke", out, datasets_dir, progress=lambda *_: None, cache_dir=tmp_path / "cache"
    )
    saved = json.loads(out.read_text())
    assert saved["normalized_accuracy"] == result["normalized_accuracy"]
    assert set(saved["normalized_accuracy"]) == set(PACT_SETTINGS)
    for method in SWEEP_METHODS:
        baseline = saved["without_pact"][method]["2"]
        assert 0.0 < baseline <= 2.0
        for name, scores in saved["normalized_accuracy"].items():
            assert 0.0 < scores[method]["2"] <= 2.0
            assert abs(saved["mean_gain"][name][method] - (scores[method]["2"] - baseline)) < 1e-12
    markdown = out.with_suffix(".md").read_text()
    assert markdown.count("| `pact+iso_c` |") == len(PACT_SETTINGS)
    # A second run reads every (setting, group, variant) from the cache: identical figures.
    again = run_pact_sweep("smoke", out, datasets_dir, progress=lambda *_: None, cache_dir=tmp_path / "cache")
    assert again["normalized_accuracy"] == result["normalized_accuracy"]
