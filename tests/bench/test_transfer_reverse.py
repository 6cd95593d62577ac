"""The transfer benchmark the other way: a deeper, wider source (tiny MPNet) to a shallower,
narrower target (tiny BERT), as ``--source all-mpnet-base-v2 --target all-MiniLM-L6-v2``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.bench.transfer import PROFILES, run_transfer_benchmark
from app.ml.errors import InvalidInput
from tests.bench.test_transfer import _task_folder
from tests.fixtures.tiny_bases import TinyBases


def test_reverse_direction_runs_with_the_layer_ablation(tiny: TinyBases, tmp_path: Path) -> None:
    datasets = _task_folder(tmp_path, tiny)
    profile = replace(
        PROFILES["quick"],
        name="tiny",
        tasks=("toy",),
        ns=(4, 8),
        methods=("bico", "naive", "utd"),
        test_limit=10,
        source_steps=2,
        finetune_min_steps=1,
        finetune_max_steps=2,
        max_tokens=32,
    )
    out = tmp_path / "out" / "reverse.json"
    report = run_transfer_benchmark(
        profile,
        out,
        datasets,
        cache_dir=tmp_path / "cache",
        source_base=str(tiny.mpnet),
        target_base=str(tiny.bert),
    )
    settings = json.loads(out.read_text())["settings"]
    assert (settings["source_base"], settings["target_base"]) == (str(tiny.mpnet), str(tiny.bert))
    # 3 source layers onto 2: BiCo folds layers, and the one-layer-each variant is measured too
    assert settings["methods"] == ["bico", "naive", "utd", "bico_nearest"]
    task = report["tasks"]["toy"]
    assert set(task["accuracy"]) == {"bico", "naive", "utd", "bico_nearest", "finetune"}
    table = out.with_suffix(".md").read_text()
    assert "| bico_nearest |" in table and f"| source learnware ({tiny.mpnet}) |" in table
    assert [f.name.split("-")[0] for f in (tmp_path / "cache" / "source").iterdir()] == ["toy"]


def test_same_base_both_sides_is_refused(tiny: TinyBases, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="both"):
        run_transfer_benchmark(
            "quick", tmp_path / "x.json", tmp_path, source_base=str(tiny.bert), target_base=str(tiny.bert)
        )
