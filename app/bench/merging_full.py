"""The merging benchmark on full fine-tunes of the base (`pavedock bench merge --learnwares full`).

The adapter benchmark (`merging.py`) merges rank-8 LoRA learnwares, whose task vectors touch an
8-dimensional subspace of 12 matrices. Here each task's learnware is a full fine-tune: every
weight of all-MiniLM-L6-v2 trained (`app.ml.full_finetune.fit_full`) with the same label-name
head, on the same tasks, train/dev/test splits and groups. The task vectors are then full-rank
in every matrix (the embeddings included), the setting of the merging and PACT papers.

Everything else is the adapter benchmark's machinery: task splits, groups, the evaluator (θ0 +
merged update on every weight), λ/α chosen on the dev splits with the same grid extension,
normalised accuracy, the per-run cache. Merges go through the registry's `merge_delta`, the
function the streaming driver applies to each tensor. Every method's scale multiplies what it
covers (2-D tensors, or every tensor for the elementwise ones) and leaves the mean taken for the
rest unscaled, so each (group, variant) is merged once at scale 1 and rescaled per grid point;
`tests/bench/test_merging_full.py` checks this against merges at other scales.

PACT runs with the settings the PACT paper uses for full fine-tunes: every 2-D matrix of the
transformer blocks (global filtering, which the paper finds necessary at high task counts),
K = k = 5% of the rank, right singular side, randomized SVD.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from app.bench.merging import (
    BASE,
    DevScore,
    MergeBenchProfile,
    _adapter_key,
    _Evaluator,
    _groups,
    _machine,
    _own_accuracies,
    _params,
    _pin_threads,
    _split_task,
    _Steps,
    _Task,
    evaluate_variants,
    scale_param,
    size_means,
    variants,
)
from app.bench.pact_sweep import SWEEP_METHODS, sweep, sweep_report
from app.bench.report import md_table
from app.ml.encoders import load_encoder
from app.ml.errors import InvalidInput
from app.ml.full_finetune import fit_full
from app.ml.merging.registry import METHODS, get_method, merge_delta
from app.ml.progress import Progress

BLOCK_MATRICES = r"encoder\.layer\."
"""PACT's layers on full fine-tunes: the 2-D weights of the transformer blocks (not the embeddings)."""

FULL_PACT: dict[str, object] = {
    "pact_layers": BLOCK_MATRICES,
    "pact_anchor_rank": 0.05,
    "pact_task_rank": 0.05,
    "pact_side": "right",
    "pact_svd": "randomized",
}

_FIXED: dict[str, dict[str, object]] = {
    "ties": {"k": 0.2},
    "dare": {"p": 0.5, "combine": "task_arithmetic", "seed": 0},
    "iso_cts": {"common_fraction": 0.8},
}

_TASKS = ("sst2", "ag_news", "trec", "sms_spam", "subj", "snips", "tweet_emotion", "tweet_offensive")

_GRIDS: dict[str, tuple[float, ...]] = {
    "task_arithmetic": (0.25, 0.5, 1.0),
    "ties": (0.5, 1.0, 1.5),
    "dare": (0.25, 0.5, 1.0),
    "tsv_m": (0.25, 0.5, 1.0),
    "iso_c": (0.5, 1.0, 2.0),
    "iso_cts": (0.5, 1.0, 2.0),
}

PROFILES: dict[str, MergeBenchProfile] = {
    # The LoRA fields of the profile are unused here (0): the learnwares train every weight.
    "smoke": MergeBenchProfile(
        name="full-ft-smoke",
        tasks=("sst2", "trec"),
        group_sizes=(2,),
        groups_per_size=1,
        train_steps=2,
        train_batch=4,
        train_lr=1e-4,
        lora_rank=0,
        lora_alpha=0.0,
        max_tokens=16,
        dev_size=8,
        test_cap=12,
        grids=dict.fromkeys(METHODS, (0.5, 1.0)),
        fixed=_FIXED,
        pact=FULL_PACT,
        grid_extensions=0,
        timing_repeats=1,
    ),
    # Sized for under an hour on one core of a 2-core CPU that other jobs share (the run got about
    # a third of a core): 40 steps of every weight per task (1.3 s a step on an idle core), the
    # nested groups of 2, 4 and 8 tasks, 32 dev and 100 test examples per task, 3-value grids
    # extended once at an edge.
    "full": MergeBenchProfile(
        name="full-ft",
        tasks=_TASKS,
        group_sizes=(2, 4, 8),
        groups_per_size=1,
        train_steps=40,
        train_batch=16,
        train_lr=1e-4,
        lora_rank=0,
        lora_alpha=0.0,
        max_tokens=64,
        dev_size=32,
        test_cap=100,
        grids=_GRIDS,
        fixed=_FIXED,
        pact=FULL_PACT,
        grid_extensions=1,
    ),
}

TaskVectors = dict[str, Tensor]
"""One full fine-tune as its task vector: {weight name: θ_t − θ0} for every trained weight."""


def resolve_full_profile(profile: str, out: Path, cache_dir: Path | None) -> tuple[MergeBenchProfile, Path]:
    """The named full-fine-tune profile and the cache folder (default: `<out's folder>/.cache/merge`)."""
    if profile not in PROFILES:
        raise InvalidInput(f"unknown full-fine-tune merge profile {profile!r}; known: {', '.join(PROFILES)}")
    return PROFILES[profile], Path(cache_dir) if cache_dir is not None else Path(
        out
    ).parent / ".cache" / "merge"


def _train_full(
    task: _Task, spec: MergeBenchProfile, base: str | Path, folder: Path, threads: int | None
) -> dict[str, float]:
    """Fine-tune every weight of the base on the task (or find it cached); saves the weights."""
    meta_path, weights = folder / "bench_meta.json", folder / "model.safetensors"
    if meta_path.is_file() and weights.is_file():
        cached: dict[str, float] = json.loads(meta_path.read_text())
        return cached
    encoder = load_encoder(base, fresh=True)
    _pin_threads(threads)
    start = time.perf_counter()
    losses = fit_full(
        encoder,
        task.train.texts,
        task.train.labels,
        task.label_names,
        steps=spec.train_steps,
        lr=spec.train_lr,
        batch_size=spec.train_batch,
        max_tokens=spec.max_tokens,
        seed=spec.seed,
    )
    facts = {"train_seconds": time.perf_counter() - start, "final_loss": float(np.mean(losses[-10:]))}
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: p.detach().contiguous() for name, p in encoder.model.named_parameters()}
    partial_file = weights.with_suffix(".partial")
    save_file(state, str(partial_file))
    partial_file.replace(weights)
    meta_path.write_text(json.dumps(facts))
    return facts


def _full_learnwares(
    tasks: Mapping[str, _Task],
    spec: MergeBenchProfile,
    base: str | Path,
    base_weights: Mapping[str, Tensor],
    folder: Path,
    threads: int | None,
    steps: _Steps,
) -> tuple[dict[str, TaskVectors], dict[str, dict[str, float]]]:
    """Each task's full fine-tune (trained now or read from the cache) as its task vector."""
    base_sha = load_encoder(base).sha256
    learnwares: dict[str, TaskVectors] = {}
    facts: dict[str, dict[str, float]] = {}
    for name, task in tasks.items():
        path = folder / ("full-" + _adapter_key(task, spec, base_sha))
        facts[name] = _train_full(task, spec, base, path, threads)
        tuned = load_file(str(path / "model.safetensors"))
        missing = sorted(set(base_weights) - set(tuned))
        if missing:
            raise InvalidInput(f"the cached fine-tune of {name} lacks {missing[:3]}: delete {path}")
        learnwares[name] = {w: tuned[w].to(torch.float32) - base_weights[w] for w in base_weights}
        facts[name]["task_vector_norm"] = float(
            np.sqrt(sum(float((tau.double() ** 2).sum()) for tau in learnwares[name].values()))
        )
        steps.step(f"fine-tune {name}")
    return learnwares, facts


def unit_merge(
    base_weights: Mapping[str, Tensor],
    members: Sequence[Mapping[str, Tensor]],
    method: str,
    params: Mapping[str, object],
) -> dict[str, tuple[Tensor, bool]]:
    """Every weight's merged update at the method's scale 1, and whether the scale multiplies it.

    The scale (λ or α) multiplies what the method merges, 2-D tensors or, for elementwise methods,
    every tensor; the rest get mean(τ), which no scale touches (see `merge_delta`).
    """
    spec = get_method(method)
    resolved = spec.resolve({**params, scale_param(method): 1.0})
    out: dict[str, tuple[Tensor, bool]] = {}
    for name, weight in base_weights.items():
        taus = [member[name] for member in members]
        out[name] = (merge_delta(name, weight, taus, spec, resolved), spec.elementwise or weight.dim() == 2)
    return out


def scaled_updates(unit: Mapping[str, tuple[Tensor, bool]], scale: float) -> dict[str, Tensor]:
    """The merged update at `scale` from `unit_merge`'s result."""
    return {name: delta * scale if scaled else delta for name, (delta, scaled) in unit.items()}


def _dev_score(
    evaluator: _Evaluator,
    tasks: Mapping[str, _Task],
    per_task: Mapping[str, Mapping[str, float]],
    unit: Mapping[str, tuple[Tensor, bool]],
    group: Sequence[str],
    scale: float,
) -> tuple[float, dict[str, Tensor]]:
    """Mean normalised dev accuracy of the group's merge at `scale`, and its updates."""
    updates = scaled_updates(unit, scale)
    evaluator.set_updates(updates)
    dev = [evaluator.accuracy(tasks[name], "dev") / per_task[name]["own_dev"] for name in group]
    return float(np.mean(dev)), updates


def _merge_and_evaluate(
    evaluator: _Evaluator,
    tasks: Mapping[str, _Task],
    per_task: Mapping[str, Mapping[str, float]],
    learnwares: Mapping[str, TaskVectors],
    groups: Mapping[int, list[tuple[str, ...]]],
    spec: MergeBenchProfile,
    steps: _Steps,
    cache: Path,
    only: Sequence[tuple[str, str, bool]] | None = None,
) -> list[dict[str, object]]:
    """`evaluate_variants` on full fine-tunes: each (group, variant) merged once at scale 1 and
    rescaled per grid point; its run records the merge's seconds."""

    def scorer(group: Sequence[str], method: str, pact: bool) -> tuple[DevScore, dict[str, object]]:
        members = [learnwares[name] for name in group]
        started = time.perf_counter()
        unit = unit_merge(evaluator.base, members, method, _params(spec, method, pact, 1.0))
        facts: dict[str, object] = {"merge_seconds": time.perf_counter() - started}
        return partial(_dev_score, evaluator, tasks, per_task, unit, group), facts

    return evaluate_variants(evaluator, tasks, per_task, groups, spec, steps, scorer, cache, only)


def group_values(
    runs: Sequence[Mapping[str, object]], key: str, sizes: Iterable[int]
) -> dict[str, list[float]]:
    """{group size: each group's mean normalised accuracy} for variant `key`: the spread behind a mean."""
    out: dict[str, list[float]] = {}
    for size in sizes:
        values = []
        for run in runs:
            if run["variant"] == key and run["group_size"] == size:
                scores = run["normalized_accuracy"]
                assert isinstance(scores, dict)
                values.append(float(np.mean(list(scores.values()))))
        out[str(size)] = values
    return out


def pact_gains(normalized: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Per method: mean over group sizes of PACT's normalised accuracy minus the method's without PACT."""
    return {
        method: float(
            np.mean(
                [normalized[f"pact+{method}"][size] - normalized[method][size] for size in normalized[method]]
            )
        )
        for method in METHODS
        if method in normalized and f"pact+{method}" in normalized
    }


@dataclass
class _Prepared:
    """The fine-tunes, the evaluator and each task's own accuracies, shared by the benchmark and
    the PACT sweep."""

    tasks: dict[str, _Task]
    evaluator: _Evaluator
    learnwares: dict[str, TaskVectors]
    per_task: dict[str, dict[str, float]]
    stage_seconds: dict[str, float]


def _prepare(
    spec: MergeBenchProfile,
    datasets_dir: Path,
    base: str | Path,
    cache: Path,
    threads: int | None,
    steps: _Steps,
) -> _Prepared:
    stage_seconds: dict[str, float] = {}
    stage = time.perf_counter()
    tasks = {name: _split_task(Path(datasets_dir), name, spec) for name in spec.tasks}
    encoder = load_encoder(base, fresh=True)
    names = [name for name, p in encoder.model.named_parameters() if p.is_floating_point()]
    evaluator = _Evaluator(encoder, names)
    learnwares, train_facts = _full_learnwares(
        tasks, spec, base, evaluator.base, cache / "full-fine-tunes", threads, steps
    )
    stage_seconds["train"] = time.perf_counter() - stage
    stage = time.perf_counter()
    _pin_threads(threads)
    per_task = _own_accuracies(evaluator, tasks, learnwares, train_facts, spec, steps)
    stage_seconds["individual"] = time.perf_counter() - stage
    return _Prepared(tasks, evaluator, learnwares, per_task, stage_seconds)


def run_full_merge_benchmark(
    profile: str,
    out: Path,
    datasets_dir: Path,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
    threads: int | None = None,
    base: str | Path = BASE,
) -> dict[str, object]:
    """Run the full-fine-tune merging benchmark; writes JSON to `out` and Markdown beside it (`.md`).

    `cache_dir` keeps the fine-tunes (`full-fine-tunes/`) and every finished run (`runs-full/`).
    `base` is the model to fine-tune (a path for tests' tiny bases).
    """
    spec, cache = resolve_full_profile(profile, out, cache_dir)
    out = Path(out)
    started = time.perf_counter()
    groups = _groups(spec)
    grid_steps = sum(len(spec.grids[method]) + 1 for _, method, _ in variants())
    total = 2 * len(spec.tasks) + sum(len(group_list) for group_list in groups.values()) * grid_steps
    with _Steps(total, progress) as steps:
        ready = _prepare(spec, datasets_dir, base, cache, threads, steps)
        stage = time.perf_counter()
        runs = _merge_and_evaluate(
            ready.evaluator,
            ready.tasks,
            ready.per_task,
            ready.learnwares,
            groups,
            spec,
            steps,
            cache / "runs-full",
        )
        ready.stage_seconds["merge_and_evaluate"] = time.perf_counter() - stage

    result = _summarise(spec, groups, ready.per_task, runs)
    result["stage_seconds"] = ready.stage_seconds
    result["seconds_total"] = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(full_merge_markdown(result))
    return result


FULL_PACT_SETTINGS: dict[str, dict[str, object]] = {
    "blocks' matrices, K=k=0.05 (the benchmark's)": FULL_PACT,
    "early layers 0-2": {**FULL_PACT, "pact_layers": r"encoder\.layer\.[0-2]\."},
    "blocks' matrices, K=k=0.1": {**FULL_PACT, "pact_anchor_rank": 0.1, "pact_task_rank": 0.1},
    "every matrix (embeddings too)": {**FULL_PACT, "pact_layers": ""},
}
"""Named PACT settings the sweep tries on full fine-tunes; the first is the benchmark's."""


def run_full_pact_sweep(
    profile: str,
    out: Path,
    datasets_dir: Path,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
    threads: int | None = None,
    base: str | Path = BASE,
) -> dict[str, object]:
    """Iso-C and TSV-M under each of `FULL_PACT_SETTINGS` on the full-fine-tune benchmark's groups,
    beside the same merger without PACT; writes JSON to `out` and Markdown beside it. Shares the
    benchmark's caches: the fine-tunes, the no-PACT runs and the default setting's runs are read."""
    spec, cache = resolve_full_profile(profile, out, cache_dir)
    out = Path(out)
    started = time.perf_counter()
    groups = _groups(spec)
    n_groups = sum(len(group_list) for group_list in groups.values())
    grid_steps = sum(len(spec.grids[method]) + 1 for method in SWEEP_METHODS)
    total = 2 * len(spec.tasks) + n_groups * grid_steps * (len(FULL_PACT_SETTINGS) + 1)
    with _Steps(total, progress) as steps:
        ready = _prepare(spec, datasets_dir, base, cache, threads, steps)

        def evaluate(
            variant_spec: MergeBenchProfile, only: list[tuple[str, str, bool]]
        ) -> list[dict[str, object]]:
            return _merge_and_evaluate(
                ready.evaluator,
                ready.tasks,
                ready.per_task,
                ready.learnwares,
                groups,
                variant_spec,
                steps,
                cache / "runs-full",
                only,
            )

        baseline, scores = sweep(FULL_PACT_SETTINGS, spec, groups, evaluate)
    return sweep_report(
        out, spec, groups, FULL_PACT_SETTINGS, baseline, scores, started, learnwares="full fine-tunes"
    )


def _summarise(
    spec: MergeBenchProfile,
    groups: Mapping[int, list[tuple[str, ...]]],
    per_task: Mapping[str, Mapping[str, float]],
    runs: list[dict[str, object]],
) -> dict[str, object]:
    keys = [key for key, _, _ in variants()]
    normalized = {key: size_means(runs, key, groups, "normalized_accuracy") for key in keys}
    chosen = {
        key: {
            str(size): [run["chosen"] for run in runs if run["variant"] == key and run["group_size"] == size]
            for size in groups
        }
        for key in keys
    }
    zero_shot = {
        str(size): float(
            np.mean(
                [
                    np.mean([per_task[n]["zero_shot_test"] / per_task[n]["own_test"] for n in group])
                    for group in group_list
                ]
            )
        )
        for size, group_list in groups.items()
    }
    merge_seconds = {
        key: {
            str(size): float(
                np.mean(
                    [
                        float(run["merge_seconds"])  # type: ignore[arg-type]
                        for run in runs
                        if run["variant"] == key and run["group_size"] == size
                    ]
                )
            )
            for size in groups
        }
        for key in keys
    }
    return {
        "benchmark": "merging",
        "learnwares": "full fine-tunes",
        "profile": spec.name,
        "settings": {
            **asdict(spec),
            "grids": dict(spec.grids),
            "fixed": dict(spec.fixed),
            "pact": dict(spec.pact),
        },
        "base": BASE,
        "machine": _machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "groups": {str(size): [list(group) for group in group_list] for size, group_list in groups.items()},
        "tasks": per_task,
        "normalized_accuracy": normalized,
        "normalized_accuracy_per_group": {key: group_values(runs, key, groups) for key in keys},
        "absolute_accuracy": {key: size_means(runs, key, groups, "test_accuracy") for key in keys},
        "zero_shot_normalized_accuracy": zero_shot,
        "pact_mean_gain": pact_gains(normalized),
        "chosen_hyperparameters": chosen,
        "merge_seconds": merge_seconds,
        "runs": runs,
    }


def _spread_text(per_group: Mapping[str, Sequence[float]], sizes: Sequence[str]) -> str:
    """Each group's normalised accuracy, e.g. `0.95,0.97 / 0.90,0.93 / 0.88`."""
    return " / ".join(",".join(f"{value:.3f}" for value in per_group.get(size, [])) for size in sizes)


def full_merge_markdown(result: Mapping[str, object]) -> str:
    """The full-fine-tune result as Markdown: normalised and absolute accuracy per variant and group
    size, each group's value, λ/α chosen on dev, merge seconds, PACT's gains, and the learnwares."""
    normalized = result["normalized_accuracy"]
    absolute = result["absolute_accuracy"]
    per_group = result["normalized_accuracy_per_group"]
    zero_shot = result["zero_shot_normalized_accuracy"]
    chosen = result["chosen_hyperparameters"]
    seconds = result["merge_seconds"]
    gains = result["pact_mean_gain"]
    tasks = result["tasks"]
    assert isinstance(normalized, dict) and isinstance(absolute, dict) and isinstance(per_group, dict)
    assert isinstance(zero_shot, dict) and isinstance(chosen, dict) and isinstance(seconds, dict)
    assert isinstance(gains, dict) and isinstance(tasks, dict)
    sizes = sorted(zero_shot, key=int)
    header = (
        ["method"]
        + [f"norm. acc ×{size}" for size in sizes]
        + [f"abs. acc ×{size}" for size in sizes]
        + ["per group (norm.)", "λ/α chosen on dev", f"merge s ×{sizes[-1]}"]
    )
    rows: list[Sequence[object]] = []
    for key in normalized:
        rows.append(
            [f"`{key}`"]
            + [normalized[key][size] for size in sizes]
            + [absolute[key][size] for size in sizes]
            + [
                _spread_text(per_group[key], sizes),
                " / ".join(
                    ",".join(f"{v:g}" for run in chosen[key][size] for v in run.values()) for size in sizes
                ),
                f"{seconds[key][sizes[-1]]:.1f}",
            ]
        )
    rows.append(["zero-shot base"] + [zero_shot[size] for size in sizes] + ["–"] * (len(sizes) + 3))
    gain_rows = [[f"`{method}`", f"{gain:+.3f}"] for method, gain in gains.items()]
    task_rows = [
        [
            name,
            facts["own_test"],
            facts["zero_shot_test"],
            facts["own_dev"],
            int(facts["test_examples"]),
            f"{facts['train_seconds']:.0f}",
        ]
        for name, facts in tasks.items()
    ]
    return (
        "\n\n".join(
            [
                f"# Merging benchmark, full fine-tunes ({result['profile']}, {result['date']})",
                md_table(header, rows),
                "Normalised accuracy: merged ÷ the task's own full fine-tune on its test split, averaged over "
                "a group's tasks and the groups of a size; per group: each group's value (sizes separated by "
                "/). Merge s: seconds of one merge (at scale 1) of the largest group.",
                "## PACT − the same method without PACT (mean over group sizes, normalised)",
                md_table(["method", "gain"], gain_rows),
                "## Learnwares (full fine-tunes)",
                md_table(
                    ["task", "own test acc", "zero-shot test acc", "own dev acc", "test examples", "train s"],
                    task_rows,
                ),
            ]
        )
        + "\n"
    )
