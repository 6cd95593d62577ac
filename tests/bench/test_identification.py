"""The identification benchmark end to end on its smoke profile: real MiniLM, real datasets,
one learnware per family and its corrupted twin, one seed of users."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.bench.identification import METHODS, run_identification_benchmark

pytestmark = pytest.mark.real_model

SCORES = ("oracle_agreement_at1", "normalized_accuracy", "quality_filter", "hit_at1", "hit_at5")


def test_smoke_profile_writes_every_key_the_issue_asks_for(datasets_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "identify.json"
    result = run_identification_benchmark("smoke", out, datasets_dir, tmp_path / "cache")
    saved = json.loads(out.read_text())
    assert saved["normalized_accuracy"] == result["normalized_accuracy"]
    assert {"pave", "pave_labels", "pave_shots", "pave_club", "rkme", "pave_renamed_shots"} <= set(METHODS)
    for prefix in ["" if method == "pave" else f"{method}_" for method in METHODS]:
        for key in SCORES:
            assert 0.0 <= saved[prefix + key] <= 1.0, prefix + key
    assert saved["spec_seconds_median"] > 0 and saved["spec_seconds_p95"] >= saved["spec_seconds_median"]
    assert 0 < saved["spec_floats"] < 0.01 * saved["base_params"]
    assert [point["recipe"] for point in saved["steps_curve"]][1:] == ["plain-1grad", "adam-1"]
    for point in saved["steps_curve"]:
        assert 0.0 <= point["labels_normalized_accuracy"] <= 1.0
    # Every user's own learnware speaks its label set: the label tiers never do worse at top-1 here.
    assert saved["pave_labels_normalized_accuracy"] >= saved["normalized_accuracy"] - 1e-9
    beyond = saved["beyond"]["methods"]
    assert {
        "PAVE♦ (top-1 fine-tuned)",
        "PAVE♦, top 5 checked on the shots",
        "RKME top-1 fine-tuned",
        "Base fine-tuned",
        "Oracle fine-tuned",
    } <= set(beyond)
    for name in ("identify.md", "identify.png"):
        assert (tmp_path / name).stat().st_size > 0
