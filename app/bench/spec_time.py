"""How long a user waits for a task spec: the default recipe against multi-step recipes, timed
on real few-shot sets with all the machine's torch threads (the identification benchmark runs
its users on one thread beside other work, so its seconds are an upper bound).

Each recipe is fitted to ``shots`` examples of every task in turn, ``repeats`` times, after one
warm-up fit; the report gives the median and p95 per recipe and, for the default recipe, each
task's median. Quality is not measured here: the identification benchmark's steps curve gives it
for the same recipes.

Seconds on a shared CPU move from day to day, so the report also measures the machine itself: its
fp32 matrix-multiply rate at the encoder's shapes, in the same run, and the floor that rate puts
under the one-gradient spec (a forward and a backward pass through the frozen base's matrices, about
4 FLOPs per token for each of its non-embedding parameters), so a figure can be read as a share
of what the CPU can do, not only in seconds.
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
from app.ml.encoders import plan_batches, token_lengths
from app.ml.pave import fit_pave_spec
from app.ml.spec_space import FitRecipe, SpecSpaceConfig, load_space

TASKS = ("sst2", "sms_spam", "trec", "ag_news", "tweet_emotion", "snips")
RECIPES: tuple[tuple[str, int, bool], ...] = (
    ("balanced-1grad (default)", 0, True),
    ("adam-10", 10, True),
    ("adam-50", 50, True),
)


def gemm_gflops(rows: int = 2048, inner: int = 384, cols: int = 1536, repeats: int = 10) -> float:
    """This CPU's fp32 matrix-multiply rate, now, with torch's threads: the median of ``repeats``
    products of the encoder's feed-forward shape (tokens × hidden @ hidden × 4·hidden)."""
    left, right = torch.randn(rows, inner), torch.randn(inner, cols)
    for _ in range(3):
        left @ right
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        left @ right
        seconds.append(time.perf_counter() - started)
    return 2.0 * rows * inner * cols / percentile(seconds, 50) / 1e9


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
    peak = gemm_gflops()
    weights = sum(p.numel() for name, p in space.encoder.model.named_parameters() if "embeddings" not in name)
    sets = [
        few_shot(load_task(datasets_dir, t, "train"), per_class=shots, max_total=shots, seed=0) for t in tasks
    ]
    cap = space.config.recipe.max_tokens  # tokens one fit runs through the base, per text
    capped = [[min(n, cap) for n in token_lengths(space.encoder.tokenizer, s.texts)] for s in sets]
    tokens = [sum(lengths) for lengths in capped]
    budget = space.config.recipe.batch_size * cap
    padded = [  # what the batches hold with their padding (`plan_batches`)
        sum(len(b) * max(lengths[i] for i in b) for b in plan_batches(lengths, token_budget=budget))
        for lengths in capped
    ]
    floor = [4.0 * weights * n / (peak * 1e9) for n in tokens]
    rows: dict[str, dict[str, float]] = {}
    per_task: dict[str, dict[str, float]] = {}
    for label, steps, balanced in recipes:
        recipe = FitRecipe(steps=steps, balanced=balanced)
        first = sets[0]
        fit_pave_spec(space, first.texts, first.labels, first.label_names, kind="task", recipe=recipe)
        seconds: dict[int, list[float]] = {i: [] for i in range(len(sets))}
        for i in tqdm([i for i in range(len(sets)) for _ in range(repeats)], desc=label):
            shot_set = sets[i]
            started = time.perf_counter()
            fit_pave_spec(
                space, shot_set.texts, shot_set.labels, shot_set.label_names, kind="task", recipe=recipe
            )
            seconds[i].append(time.perf_counter() - started)
        every = [x for xs in seconds.values() for x in xs]
        rows[label] = {
            "steps": steps,
            "median_seconds": round(percentile(every, 50), 4),
            "p95_seconds": round(percentile(every, 95), 4),
        }
        if steps == 0:
            per_task = {
                task: {
                    "tokens": tokens[i],
                    "padded_tokens": padded[i],
                    "median_seconds": round(percentile(seconds[i], 50), 4),
                    "floor_seconds": round(floor[i], 4),
                    "share_of_peak": round(floor[i] / percentile(seconds[i], 50), 3),
                }
                for i, task in enumerate(tasks)
            }
    report: dict[str, Any] = {
        "benchmark": "spec-time",
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "space_id": space.id,
        "tasks": list(tasks),
        "shots": [len(s) for s in sets],
        "repeats": repeats,
        "gemm_gflops": round(peak, 1),
        "base_non_embedding_parameters": weights,
        "recipes": rows,
        "one_gradient_per_task": per_task,
    }
    write_json(Path(out), report)
    table = md_table(
        ["recipe", "steps", "median s", "p95 s"],
        [[label, r["steps"], r["median_seconds"], r["p95_seconds"]] for label, r in rows.items()],
    )
    by_task = md_table(
        ["task", "tokens", "padded tokens", "median s", "floor s at the GEMM rate", "share of peak"],
        [
            [t, r["tokens"], r["padded_tokens"], r["median_seconds"], r["floor_seconds"], r["share_of_peak"]]
            for t, r in per_task.items()
        ],
    )
    Path(out).with_suffix(".md").write_text(
        f"User spec time, {shots} shots, {len(tasks)} tasks × {repeats}, "
        f"{torch.get_num_threads()} torch threads; this CPU multiplies fp32 matrices at "
        f"{peak:.0f} GFLOP/s (measured in the same run)\n\n{table}\n\n"
        "The default recipe per task: the floor is 4 FLOPs per token for each of the base's "
        f"{weights / 1e6:.1f} M non-embedding parameters (a forward and a backward pass) at that "
        "rate, counted on the real tokens; the batches also hold padding (`plan_batches`)"
        f"\n\n{by_task}\n"
    )
    return report
