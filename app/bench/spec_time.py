"""How long a user waits for a task spec: the default recipe against multi-step recipes, timed
on real few-shot sets with all the machine's torch threads (the identification benchmark runs
its users on one thread beside other work, so its seconds are an upper bound).

Each recipe is fitted to ``shots`` examples of every task in turn, ``repeats`` times, after one
warm-up fit; the report gives the median and p95 per recipe. Quality is not measured here: the
identification benchmark's steps curve gives it for the same recipes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from app.bench.report import machine, md_table, percentile, write_json
from app.ml.data import few_shot, load_task
from app.ml.pave import fit_pave_spec
from app.ml.spec_space import FitRecipe, SpecSpaceConfig, load_space

TASKS = ("sst2", "sms_spam", "trec", "ag_news", "tweet_emotion", "snips")
RECIPES: tuple[tuple[str, int, bool], ...] = (
    ("balanced-1grad (default)", 0, True),
    ("adam-10", 10, True),
    ("adam-50", 50, True),
)


def run_spec_time_benchmark(
    out: Path,
    datasets_dir: Path,
    *,
    tasks: Sequence[str] = TASKS,
    shots: int = 32,
    repeats: int = 3,
    recipes: Sequence[tuple[str, int, bool]] = RECIPES,
) -> dict[str, Any]:
    """Time user specs per recipe; write ``out`` (JSON) and ``out`` with suffix .md."""
    space = load_space(SpecSpaceConfig())
    sets = [
        few_shot(load_task(datasets_dir, t, "train"), per_class=shots, max_total=shots, seed=0) for t in tasks
    ]
    rows: dict[str, dict[str, float]] = {}
    for label, steps, balanced in recipes:
        recipe = FitRecipe(steps=steps, balanced=balanced)
        first = sets[0]
        fit_pave_spec(space, first.texts, first.labels, first.label_names, kind="task", recipe=recipe)
        seconds: list[float] = []
        for shot_set in tqdm([s for s in sets for _ in range(repeats)], desc=label):
            started = time.perf_counter()
            fit_pave_spec(
                space, shot_set.texts, shot_set.labels, shot_set.label_names, kind="task", recipe=recipe
            )
            seconds.append(time.perf_counter() - started)
        rows[label] = {
            "steps": steps,
            "median_seconds": round(percentile(seconds, 50), 4),
            "p95_seconds": round(percentile(seconds, 95), 4),
        }
    report: dict[str, Any] = {
        "benchmark": "spec-time",
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "space_id": space.id,
        "tasks": list(tasks),
        "shots": [len(s) for s in sets],
        "repeats": repeats,
        "recipes": rows,
    }
    write_json(Path(out), report)
    table = md_table(
        ["recipe", "steps", "median s", "p95 s"],
        [[label, r["steps"], r["median_seconds"], r["p95_seconds"]] for label, r in rows.items()],
    )
    Path(out).with_suffix(".md").write_text(
        f"User spec time, {shots} shots, {len(tasks)} tasks × {repeats}, "
        f"{torch.get_num_threads()} torch threads\n\n{table}\n"
    )
    return report
