"""Which PACT settings help which merger: a sweep on the merging benchmark's learnwares and groups.

The merging benchmark runs PACT at its registry defaults (K = k = 0.05, right side, every
LoRA-touched matrix). The PACT paper reports its largest gains from filtering early layers and
leaves K, k and the side open, so this sweep reruns the strong mergers (Iso-C, TSV-M) under a
handful of named PACT settings, each with λ/α chosen on dev exactly as in the benchmark, and
reports test normalised accuracy per group size beside the same merger without PACT.

It shares the benchmark's caches: adapters are never retrained, and each (setting, group,
variant) run is kept, so the default setting and the no-PACT baselines come straight from a
finished `pavedock bench merge` run of the same profile.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from app.bench.merging import (
    BASE,
    MergeBenchProfile,
    _Evaluator,
    _groups,
    _learnwares,
    _machine,
    _merge_and_evaluate,
    _own_accuracies,
    _pin_threads,
    _split_task,
    _Steps,
    resolve_profile,
    size_means,
)
from app.ml.encoders import load_encoder
from app.ml.progress import Progress

SWEEP_METHODS = ("iso_c", "tsv_m")

EARLY_LAYERS = r"layer\.[0-2]\."
"""The first half of MiniLM's six layers."""

PACT_SETTINGS: dict[str, dict[str, object]] = {
    "default (K=k=0.05, right, all layers)": {},
    "early layers 0-2": {"pact_layers": EARLY_LAYERS},
    "early layers 0-2, K=0.1": {"pact_layers": EARLY_LAYERS, "pact_anchor_rank": 0.1},
    "K=0.02": {"pact_anchor_rank": 0.02},
    "K=0.1": {"pact_anchor_rank": 0.1},
    "left side": {"pact_side": "left"},
}
"""Named PACT parameter sets (on top of pact=True); the first is the benchmark's."""


# Runs the given (key, method, pact) variants on every group under a profile (with its PACT
# parameters): `merging._merge_and_evaluate` or its full-fine-tune twin, bound to the learnwares.
Evaluate = Callable[[MergeBenchProfile, list[tuple[str, str, bool]]], list[dict[str, object]]]
Scores = dict[str, dict[str, float]]
"""{method: {group size: mean normalised test accuracy}}."""


def sweep(
    settings: Mapping[str, Mapping[str, object]],
    spec: MergeBenchProfile,
    groups: Mapping[int, list[tuple[str, ...]]],
    evaluate: Evaluate,
) -> tuple[Scores, dict[str, Scores]]:
    """`SWEEP_METHODS` without PACT, then with PACT under each named setting."""

    def run(setting: Mapping[str, object] | None) -> Scores:
        pact = setting is not None
        variant_spec = spec if setting is None else replace(spec, pact=dict(setting))
        only = [(("pact+" if pact else "") + method, method, pact) for method in SWEEP_METHODS]
        runs = evaluate(variant_spec, only)
        return {
            method: size_means(runs, ("pact+" if pact else "") + method, groups, "normalized_accuracy")
            for method in SWEEP_METHODS
        }

    baseline = run(None)
    return baseline, {name: run(setting) for name, setting in settings.items()}


def sweep_report(
    out: Path,
    spec: MergeBenchProfile,
    groups: Mapping[int, list[tuple[str, ...]]],
    settings: Mapping[str, Mapping[str, object]],
    baseline: Scores,
    scores: Mapping[str, Scores],
    started: float,
    learnwares: str | None = None,
) -> dict[str, object]:
    """The sweep's result (each setting's gain over the merger without PACT), written to `out`
    as JSON and beside it as Markdown (`.md`)."""
    result: dict[str, object] = {
        "benchmark": "pact-sweep",
        **({"learnwares": learnwares} if learnwares else {}),
        "profile": spec.name,
        "methods": list(SWEEP_METHODS),
        "settings": settings,
        "groups": {str(size): [list(group) for group in group_list] for size, group_list in groups.items()},
        "without_pact": baseline,
        "normalized_accuracy": scores,
        "mean_gain": {
            name: {
                method: float(
                    np.mean(list(by_size[method].values())) - np.mean(list(baseline[method].values()))
                )
                for method in SWEEP_METHODS
            }
            for name, by_size in scores.items()
        },
        "machine": _machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "seconds_total": time.perf_counter() - started,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(pact_sweep_markdown(result))
    return result


def run_pact_sweep(
    profile: str,
    out: Path,
    datasets_dir: Path,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
    threads: int | None = None,
) -> dict[str, object]:
    """Run the sweep; writes JSON to `out` and a Markdown table beside it (`.md`)."""
    spec, cache = resolve_profile(profile, out, cache_dir)
    out = Path(out)
    started = time.perf_counter()
    groups = _groups(spec)
    n_groups = sum(len(group_list) for group_list in groups.values())
    grid_steps = sum(len(spec.grids[method]) + 1 for method in SWEEP_METHODS)
    total = 2 * len(spec.tasks) + n_groups * grid_steps * (len(PACT_SETTINGS) + 1)
    with _Steps(total, progress) as steps:
        tasks = {name: _split_task(Path(datasets_dir), name, spec) for name in spec.tasks}
        learnwares, train_facts = _learnwares(tasks, spec, cache / "adapters", threads, steps)
        names = sorted({weight for learnware in learnwares.values() for weight in learnware})
        evaluator = _Evaluator(load_encoder(BASE, fresh=True), names)
        _pin_threads(threads)
        per_task = _own_accuracies(evaluator, tasks, learnwares, train_facts, spec, steps)

        def evaluate(
            variant_spec: MergeBenchProfile, only: list[tuple[str, str, bool]]
        ) -> list[dict[str, object]]:
            return _merge_and_evaluate(
                evaluator, tasks, per_task, learnwares, groups, variant_spec, steps, cache / "runs", only
            )

        baseline, scores = sweep(PACT_SETTINGS, spec, groups, evaluate)
    return sweep_report(out, spec, groups, PACT_SETTINGS, baseline, scores, started)


def pact_sweep_markdown(result: Mapping[str, object]) -> str:
    """The sweep as a Markdown table: one row per (method, setting), one column per group size."""
    baseline = result["without_pact"]
    settings = result["normalized_accuracy"]
    gains = result["mean_gain"]
    assert isinstance(baseline, dict) and isinstance(settings, dict) and isinstance(gains, dict)
    sizes = list(next(iter(baseline.values())))
    lines = [
        f"# PACT sweep ({result['profile']}, {result['date']})",
        "",
        "| method | PACT setting | " + " | ".join(f"norm. acc ×{s}" for s in sizes) + " | mean − no PACT |",
        "|---|---|" + "---|" * len(sizes) + "---|",
    ]
    methods = result["methods"]
    assert isinstance(methods, list)
    for method in methods:
        row = baseline[method]
        lines.append(f"| `{method}` | none | " + " | ".join(f"{row[s]:.3f}" for s in sizes) + " | – |")
        for name, scores in settings.items():
            row = scores[method]
            gain = gains[name][method]
            lines.append(
                f"| `pact+{method}` | {name} | "
                + " | ".join(f"{row[s]:.3f}" for s in sizes)
                + f" | {gain:+.3f} |"
            )
    lines.append("")
    return "\n".join(lines)
