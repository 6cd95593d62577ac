"""The transfer benchmark end to end on tiny bases and a tiny task folder."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.bench.transfer import PROFILES, get_profile, run_transfer_benchmark
from app.ml.errors import InvalidInput
from tests.fixtures.tiny_bases import LABEL_NAMES, TinyBases


def _task_folder(root: Path, tiny: TinyBases) -> Path:
    folder = root / "datasets" / "toy"
    folder.mkdir(parents=True)
    (folder / "labels.json").write_text(json.dumps(LABEL_NAMES))
    rows = [json.dumps({"text": t, "label": y}) for t, y in zip(tiny.texts, tiny.labels, strict=True)]
    (folder / "train.jsonl").write_text("\n".join(rows[:32]) + "\n")
    (folder / "test.jsonl").write_text("\n".join(rows[32:]) + "\n")
    return folder.parent


def test_benchmark_runs_and_caches(tiny: TinyBases, tmp_path: Path) -> None:
    datasets = _task_folder(tmp_path, tiny)
    profile = replace(
        PROFILES["quick"],
        name="tiny",
        tasks=("toy",),
        ns=(4, 8),
        methods=("bico", "naive", "utd"),
        test_limit=10,
        source_base=str(tiny.bert),
        target_base=str(tiny.mpnet),
        source_steps=2,
        finetune_min_steps=1,
        finetune_max_steps=2,
        max_tokens=32,
    )
    out = tmp_path / "out" / "transfer.json"
    messages: list[str] = []
    report = run_transfer_benchmark(
        profile, out, datasets, lambda d, t, m: messages.append(m), cache_dir=tmp_path / "cache"
    )
    assert json.loads(out.read_text())["profile"] == "tiny"
    assert "| bico |" in out.with_suffix(".md").read_text()
    for key in ("gain_over_zero_shot", "share_of_finetune_gain", "transfer_seconds"):
        assert set(report[key]) >= set(profile.methods)
        assert all(set(v) == {"4", "8"} for m, v in report[key].items() if m in profile.methods)
    task = report["tasks"]["toy"]
    assert task["n_test"] == 10
    assert 0.0 <= task["accuracy"]["bico"]["8"] <= 1.0
    assert report["gain_over_zero_shot"]["bico"]["4"] == pytest.approx(
        task["accuracy"]["bico"]["4"] - task["zero_shot"]
    )
    assert any("calibration pass" in m for m in messages)
    again = run_transfer_benchmark(
        profile, out, datasets, lambda d, t, m: messages.append(m), cache_dir=tmp_path / "cache"
    )
    assert messages[-1] == "toy: cached"
    assert again["tasks"] == report["tasks"]


def test_unknown_profile_is_named() -> None:
    with pytest.raises(InvalidInput, match="'huge'"):
        get_profile("huge")
    assert len(PROFILES["quick"].tasks) >= 8
    assert PROFILES["quick"].ns == (16, 64, 256)
