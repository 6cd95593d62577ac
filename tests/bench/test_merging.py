"""The merging benchmark's pieces that need no real model: variants, groups, tuning, the report."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from app.bench.merging import (
    PROFILES,
    _groups,
    _Steps,
    _tune_on_dev,
    merge_markdown,
    run_merge_benchmark,
    scale_param,
    variants,
)
from app.ml.errors import InvalidInput
from app.ml.merging import METHODS

pytestmark = pytest.mark.usefixtures("single_thread")


def test_variants_cover_every_method_with_and_without_pact() -> None:
    keys = [key for key, _, _ in variants()]
    assert set(keys) == set(METHODS) | {f"pact+{name}" for name in METHODS}
    assert {scale_param(name) for name in METHODS} == {"lam", "alpha"}


def test_quick_groups_are_nested_prefixes_and_full_groups_are_distinct() -> None:
    quick = _groups(PROFILES["quick"])
    assert [len(groups) for groups in quick.values()] == [1, 1, 1]
    assert quick[4][0][:2] == quick[2][0]
    full = _groups(PROFILES["full"])
    assert all(len(set(groups)) == len(groups) for groups in full.values())
    assert len(full[2]) == PROFILES["full"].groups_per_size


def test_every_profile_has_a_grid_per_method() -> None:
    for profile in PROFILES.values():
        assert set(profile.grids) == set(METHODS)
        for method, values in profile.fixed.items():
            METHODS[method].resolve({**values, scale_param(method): profile.grids[method][0]})


def test_unknown_profile_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidInput, match="unknown merge benchmark profile 'huge'; known: smoke, quick, full"
    ):
        run_merge_benchmark("huge", tmp_path / "out.json", tmp_path)


def test_markdown_report_has_a_row_per_variant() -> None:
    sizes = {"2": 0.9, "4": 0.8}
    result: dict[str, object] = {
        "profile": "quick",
        "date": "2026-01-01",
        "normalized_accuracy": {key: sizes for key, _, _ in variants()},
        "absolute_accuracy": {key: sizes for key, _, _ in variants()},
        "zero_shot_normalized_accuracy": {"2": 0.5, "4": 0.4},
        "merge_seconds": {"iso_c": 1.25},
        "peak_memory_bytes": {"iso_c": 2 * 2**20},
        "base_bytes": 2**20,
        "lowrank_speedup": {"iso_c": 12.0},
        "tasks": {"sst2": {"own_test": 0.8, "zero_shot_test": 0.6, "own_dev": 0.79, "test_examples": 150.0}},
        "chosen_hyperparameters": {"iso_c": {"2": [{"alpha": 1.5}], "4": [{"alpha": 3.0}, {"alpha": 1.5}]}},
    }
    markdown = merge_markdown(result)
    assert "| `pact+iso_c` | 0.900 | 0.800 | 0.900 | 0.800 | – | – | – | – |" in markdown
    assert "| `iso_c` | 0.900 | 0.800 | 0.900 | 0.800 | 1.5 / 3,1.5 | 1.250 | 2.000 | 12.0× |" in markdown
    assert "| zero-shot base | 0.500 | 0.400 |" in markdown
    assert "| sst2 | 0.800 | 0.600 | 0.790 | 150 |" in markdown


def test_grid_extends_while_the_best_is_on_its_edge() -> None:
    seen: list[str] = []
    steps = _Steps(3, lambda done, total, message: seen.append(f"{done}/{total} {message}"))

    def score(scale: float) -> tuple[float, dict[str, torch.Tensor]]:
        return -abs(math.log(scale / 2.8)), {"w": torch.full((1,), scale)}

    best, curve, updates = _tune_on_dev(score, (0.35, 0.7, 1.4), 3, steps, "lam")
    assert best == pytest.approx(2.8) and updates["w"].item() == pytest.approx(2.8)
    assert sorted(curve) == pytest.approx([0.35, 0.7, 1.4, 2.8, 5.6])
    assert seen[-1].startswith("5/5 lam=5.6 dev")

    low, low_curve, _ = _tune_on_dev(lambda s: (-s, {}), (0.4, 0.8), 2, _Steps(2, None), "alpha")
    assert low == pytest.approx(0.1) and min(low_curve) == pytest.approx(0.1)

    capped, capped_curve, _ = _tune_on_dev(
        lambda s: (s, {}), (2.0, 4.0), 3, _Steps(2, None), "alpha", (0.0, 10.0)
    )
    assert capped == 8.0 and max(capped_curve) == 8.0, "stops before leaving the declared range"


def test_fast_runs_are_timed_until_the_budget_is_spent_and_slow_ones_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.bench import merging as bench

    calls: list[int] = []

    def fast() -> int:
        calls.append(1)
        return len(calls)

    seconds, last = bench._timed(3, fast)
    assert last == len(calls) == bench.TIMING_MAX_REPEATS  # microseconds each: the cap stops it
    assert seconds >= 0.0

    clock = iter([0.0, 2.0])
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    assert bench._timed(3, lambda: 7) == (2.0, 7)  # one 2-second run: timed once
