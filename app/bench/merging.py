"""The merging benchmark (BENCHMARK.md "Merging") on the real base and the real text tasks.

Learnwares: one LoRA adapter per task (r = 8 on `query`/`value` of all-MiniLM-L6-v2, peft) with
the training-free label-name head, trained by the dock's own trainer on the task's train split
minus a dev split carved from it (seeded); adapters are cached, so a second run trains nothing.

Merges: groups of 2, 4 and 8 tasks, every method of the registry with and without PACT, through
the low-rank path (`merge_lora`, equal to the dense path up to rounding; the tests prove it).
Each method's λ or α is chosen per group on the dev splits (mean normalised dev accuracy), never
on test. The merged model is evaluated on each task's test split (capped) with that task's label
names; normalised accuracy = merged ÷ the task's own learnware, averaged over the group's tasks
and then over the groups of a size.

Cost: low-rank against dense path for the methods that have both (8-task group, best of a few
repeats), and the streaming driver over real safetensors checkpoints (base + 8 LoRA-merged fine-
tunes) per variant: seconds and peak memory, measured in a fresh process as the growth of its
anonymous resident memory (sampled every 2 ms), against the size of the base's weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from safetensors.torch import save_file
from torch import Tensor
from tqdm import tqdm

from app.bench.report import md_table
from app.ml.adapters import LoraDelta, read_lora_adapter
from app.ml.data import TextTask, load_task
from app.ml.encoders import Encoder, TokenBatch, load_encoder, mean_pool, token_batches
from app.ml.errors import InvalidInput
from app.ml.finetune import LoraClassifier
from app.ml.head import LabelNameHead
from app.ml.merging.driver import dense_update, merge_lora
from app.ml.merging.measure import measure_in_fresh_process
from app.ml.merging.registry import METHODS, get_method, merge_delta
from app.ml.progress import Progress

T = TypeVar("T")

BASE = "all-MiniLM-L6-v2"
LOWRANK_METHODS = ("task_arithmetic", "tsv_m", "iso_c", "iso_cts")


@dataclass(frozen=True)
class MergeBenchProfile:
    """Everything that sizes a run of the merging benchmark."""

    name: str
    tasks: tuple[str, ...]
    group_sizes: tuple[int, ...]
    groups_per_size: int
    """1: nested prefixes of `tasks`; more: that many seeded random groups per size below len(tasks)."""
    train_steps: int
    train_batch: int
    train_lr: float
    lora_rank: int
    lora_alpha: float
    max_tokens: int
    dev_size: int
    test_cap: int
    grids: Mapping[str, tuple[float, ...]]
    """Candidate λ (task_arithmetic, ties, dare) or α (tsv_m, iso_c, iso_cts), chosen on dev."""
    fixed: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Parameters held at one value per method."""
    pact: Mapping[str, object] = field(default_factory=dict)
    """PACT's parameters for the `pact+` variants (besides pact=True)."""
    grid_extensions: int = 2
    """Extra grid points tried, geometrically, while the best dev score lies on the grid's edge."""
    timing_repeats: int = 3
    seed: int = 0


QUICK_TASKS = ("sst2", "ag_news", "trec", "sms_spam", "subj", "snips", "tweet_emotion", "tweet_offensive")

_FIXED: dict[str, dict[str, object]] = {
    "ties": {"k": 0.2},
    "dare": {"p": 0.5, "combine": "task_arithmetic", "seed": 0},
    "iso_cts": {"common_fraction": 0.8},
}

PROFILES: dict[str, MergeBenchProfile] = {
    "smoke": MergeBenchProfile(
        name="smoke",
        tasks=("sst2", "trec"),
        group_sizes=(2,),
        groups_per_size=1,
        train_steps=4,
        train_batch=8,
        train_lr=2e-3,
        lora_rank=8,
        lora_alpha=16.0,
        max_tokens=32,
        dev_size=16,
        test_cap=24,
        grids=dict.fromkeys(METHODS, (1.0,)),
        fixed=_FIXED,
        timing_repeats=1,
    ),
    "quick": MergeBenchProfile(
        name="quick",
        tasks=QUICK_TASKS,
        group_sizes=(2, 4, 8),
        groups_per_size=1,
        train_steps=60,
        train_batch=16,
        train_lr=2e-3,
        lora_rank=8,
        lora_alpha=16.0,
        max_tokens=64,
        dev_size=48,
        test_cap=150,
        grids={
            "task_arithmetic": (0.35, 0.7, 1.4),
            "ties": (0.6, 1.0, 1.5),
            "dare": (0.35, 0.7, 1.4),
            "tsv_m": (0.35, 0.7, 1.4),
            "iso_c": (0.75, 1.5, 3.0),
            "iso_cts": (0.75, 1.5, 3.0),
        },
        fixed=_FIXED,
    ),
    # Two random groups of 2 and of 4 tasks (8 is the whole list), stronger learnwares, larger dev
    # and test splits and finer grids than quick: about 45 minutes on a 2-core CPU.
    "full": MergeBenchProfile(
        name="full",
        tasks=QUICK_TASKS,
        group_sizes=(2, 4, 8),
        groups_per_size=2,
        train_steps=120,
        train_batch=16,
        train_lr=2e-3,
        lora_rank=8,
        lora_alpha=16.0,
        max_tokens=64,
        dev_size=100,
        test_cap=300,
        grids={
            "task_arithmetic": (0.35, 0.5, 0.7, 1.0, 1.4),
            "ties": (0.6, 0.8, 1.0, 1.25, 1.5),
            "dare": (0.35, 0.5, 0.7, 1.0, 1.4),
            "tsv_m": (0.35, 0.5, 0.7, 1.0, 1.4),
            "iso_c": (0.75, 1.0, 1.5, 2.0, 3.0),
            "iso_cts": (0.75, 1.0, 1.5, 2.0, 3.0),
        },
        fixed=_FIXED,
    ),
}


def scale_param(method: str) -> str:
    """The name of the scale a method's grid searches: λ (`lam`) or α (`alpha`)."""
    names = {spec.name for spec in get_method(method).params}
    return "lam" if "lam" in names else "alpha"


def _scale_bounds(method: str) -> tuple[float, float]:
    """The declared range of the method's scale parameter (0 excluded: a zero scale merges nothing)."""
    spec = next(spec for spec in get_method(method).params if spec.name == scale_param(method))
    low = 0.0 if spec.low is None else max(spec.low, 0.0)
    return (low, float("inf") if spec.high is None else spec.high)


def variants() -> list[tuple[str, str, bool]]:
    """(key, method, pact) for every method with and without PACT: `iso_c`, `pact+iso_c`, …"""
    return [(("pact+" if pact else "") + name, name, pact) for name in METHODS for pact in (False, True)]


@dataclass
class _Task:
    name: str
    label_names: list[str]
    train: TextTask
    dev: TextTask
    test: TextTask
    head: LabelNameHead | None = None
    dev_batches: list[TokenBatch] = field(default_factory=list)
    test_batches: list[TokenBatch] = field(default_factory=list)


def _split_task(datasets_dir: Path, name: str, profile: MergeBenchProfile) -> _Task:
    train = load_task(datasets_dir, name, "train")
    if len(train) <= profile.dev_size:
        raise InvalidInput(f"task {name!r} has {len(train)} training rows, too few to carve a dev split")
    order = np.random.default_rng(profile.seed).permutation(len(train))
    test = load_task(datasets_dir, name, "test", limit=profile.test_cap, seed=profile.seed)
    return _Task(
        name,
        train.label_names,
        train.subset(np.sort(order[profile.dev_size :])),
        train.subset(np.sort(order[: profile.dev_size])),
        test,
    )


def _adapter_key(task: _Task, profile: MergeBenchProfile, base_sha: str) -> str:
    recipe = {
        "task": task.name,
        "base": base_sha,
        "rows": len(task.train),
        "steps": profile.train_steps,
        "batch": profile.train_batch,
        "lr": profile.train_lr,
        "rank": profile.lora_rank,
        "alpha": profile.lora_alpha,
        "max_tokens": profile.max_tokens,
        "dev_size": profile.dev_size,
        "seed": profile.seed,
    }
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    return f"{task.name}-{digest}"


def _pin_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(threads)


def _train_adapter(
    task: _Task, profile: MergeBenchProfile, folder: Path, threads: int | None = None
) -> dict[str, float]:
    """Train (or find cached) the task's LoRA learnware; returns its training facts."""
    meta_path = folder / "bench_meta.json"
    if meta_path.is_file() and (folder / "adapter_model.safetensors").is_file():
        cached: dict[str, float] = json.loads(meta_path.read_text())
        return cached
    classifier = LoraClassifier.new(BASE, rank=profile.lora_rank, alpha=profile.lora_alpha, seed=profile.seed)
    classifier.max_tokens = profile.max_tokens
    _pin_threads(threads)
    start = time.perf_counter()
    losses = classifier.fit(
        task.train.texts,
        task.train.labels,
        task.label_names,
        steps=profile.train_steps,
        lr=profile.train_lr,
        batch_size=profile.train_batch,
        seed=profile.seed,
    )
    facts = {"train_seconds": time.perf_counter() - start, "final_loss": float(np.mean(losses[-10:]))}
    classifier.save(folder)
    meta_path.write_text(json.dumps(facts))
    return facts


class _Evaluator:
    """The base with swappable merged weights, and each task's pre-tokenised dev and test batches."""

    def __init__(self, encoder: Encoder, names: Sequence[str]) -> None:
        self.encoder = encoder
        self.params = dict(encoder.model.named_parameters())
        missing = [name for name in names if name not in self.params]
        if missing:
            raise InvalidInput(f"the base has no weights {missing[:3]}")
        self.base = {name: self.params[name].detach().clone() for name in names}

    def prepare(self, task: _Task, max_tokens: int) -> None:
        """Embed the label names with the untouched base and tokenise the splits once."""
        self.set_updates({})
        task.head = LabelNameHead.from_names(self.encoder, task.label_names)
        for split, target in ((task.dev, task.dev_batches), (task.test, task.test_batches)):
            target.extend(
                token_batches(
                    self.encoder.tokenizer,
                    split.texts,
                    batch_size=64,
                    max_tokens=max_tokens,
                    device=self.encoder.device,
                )
            )

    @torch.no_grad()
    def set_updates(self, updates: Mapping[str, Tensor]) -> None:
        """θ = θ0 + update on the touched weights (θ0 elsewhere)."""
        for name, weight in self.base.items():
            update = updates.get(name)
            self.params[name].copy_(weight if update is None else weight + update)

    @torch.inference_mode()
    def accuracy(self, task: _Task, split: str) -> float:
        assert task.head is not None
        batches, labels = (
            (task.dev_batches, task.dev.labels) if split == "dev" else (task.test_batches, task.test.labels)
        )
        correct = 0
        for batch in batches:
            hidden = self.encoder.model(**batch.inputs).last_hidden_state
            logits = task.head.logits(mean_pool(hidden, batch.inputs["attention_mask"]))
            predicted = logits.argmax(dim=-1).cpu().numpy()
            correct += int((predicted == labels[batch.indices]).sum())
        return correct / len(labels)


def _dev_score(
    evaluator: _Evaluator,
    tasks: Mapping[str, _Task],
    per_task: Mapping[str, Mapping[str, float]],
    profile: MergeBenchProfile,
    members: Sequence[Mapping[str, LoraDelta]],
    group: Sequence[str],
    method: str,
    pact: bool,
    scale: float,
) -> tuple[float, dict[str, Tensor]]:
    """Mean normalised dev accuracy of the group merged at `scale`, and the merged updates."""
    params = _params(profile, method, pact, scale)
    updates = _dense_updates(merge_lora(members, method, params, base_weights=evaluator.base))
    evaluator.set_updates(updates)
    dev = [evaluator.accuracy(tasks[name], "dev") / per_task[name]["own_dev"] for name in group]
    return float(np.mean(dev)), updates


def _tune_on_dev(
    score: Callable[[float], tuple[float, dict[str, Tensor]]],
    grid: Sequence[float],
    extensions: int,
    steps: _Steps,
    label: str,
    bounds: tuple[float, float] = (float("-inf"), float("inf")),
) -> tuple[float, dict[float, float], dict[str, Tensor]]:
    """The scale with the best dev score over `grid`, extending the grid geometrically (up to
    `extensions` times, within `bounds`) while the best lies on its edge; returns it, every score,
    and its updates."""
    curve: dict[float, float] = {}
    best: tuple[float, float, dict[str, Tensor]] | None = None

    def visit(scale: float) -> None:
        nonlocal best
        value, updates = score(scale)
        curve[scale] = value
        if best is None or value > best[0]:
            best = (value, scale, updates)
        steps.step(f"{label}={scale:g} dev {value:.3f}")

    values = sorted(grid)
    for scale in values:
        visit(scale)
    for _ in range(extensions if len(values) > 1 else 0):
        assert best is not None
        known = sorted(curve)
        if best[1] == known[-1]:
            new = known[-1] * known[-1] / known[-2]
        elif best[1] == known[0]:
            new = known[0] * known[0] / known[1]
        else:
            break
        new = round(new, 6)
        if not bounds[0] <= new <= bounds[1]:
            break
        steps.grow(1)
        visit(new)
    assert best is not None
    return best[1], curve, best[2]


def _groups(profile: MergeBenchProfile) -> dict[int, list[tuple[str, ...]]]:
    rng = np.random.default_rng(profile.seed)
    out: dict[int, list[tuple[str, ...]]] = {}
    for size in profile.group_sizes:
        if size > len(profile.tasks) or size < 2:
            raise InvalidInput(f"group size {size} does not fit {len(profile.tasks)} tasks")
        if profile.groups_per_size == 1 or size == len(profile.tasks):
            out[size] = [profile.tasks[:size]]
        else:
            seen: list[tuple[str, ...]] = []
            while len(seen) < profile.groups_per_size:
                group = tuple(
                    profile.tasks[i] for i in sorted(rng.choice(len(profile.tasks), size, replace=False))
                )
                if group not in seen:
                    seen.append(group)
            out[size] = seen
    return out


def _params(profile: MergeBenchProfile, method: str, pact: bool, scale: float) -> dict[str, object]:
    params: dict[str, object] = dict(profile.fixed.get(method, {}))
    params[scale_param(method)] = scale
    if pact:
        params.update({"pact": True, **profile.pact})
    return params


def _dense_updates(updates: Mapping[str, LoraDelta | Tensor]) -> dict[str, Tensor]:
    return {name: dense_update(update) for name, update in updates.items()}


TIMING_BUDGET_SECONDS = 1.0
"""Fast runs repeat until they have taken this long in all (like timeit), at most `TIMING_MAX_REPEATS`."""

TIMING_MAX_REPEATS = 50


def _timed(repeats: int, run: Callable[[], T]) -> tuple[float, T]:
    """Best wall-clock seconds of `run` and its last result.

    A run of 1 s or more is timed once; a faster one at least `repeats` times and until the runs
    have taken `TIMING_BUDGET_SECONDS` together, so a millisecond run gets as many chances to
    dodge a busy neighbour as a slow one.
    """
    start = time.perf_counter()
    result = run()
    best = spent = time.perf_counter() - start
    count = 1
    while best < 1.0 and count < TIMING_MAX_REPEATS and (count < repeats or spent < TIMING_BUDGET_SECONDS):
        start = time.perf_counter()
        result = run()
        took = time.perf_counter() - start
        best, spent, count = min(best, took), spent + took, count + 1
    return best, result


def _machine() -> dict[str, object]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


class _Steps:
    """Counts benchmark steps for the progress callback (or a tqdm bar when none is given)."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total = total
        self.done = 0
        self._progress = progress
        self._bar = (
            tqdm(total=total, desc="merge bench", unit="step", dynamic_ncols=True)
            if progress is None
            else None
        )

    def grow(self, extra: int) -> None:
        """Add `extra` steps to the total (a grid extended at run time)."""
        self.total += extra
        if self._bar is not None:
            self._bar.total = self.total

    def step(self, message: str, count: int = 1) -> None:
        self.done += count
        if self._progress is not None:
            self._progress(self.done, self.total, message)
        if self._bar is not None:
            self._bar.set_postfix_str(message, refresh=False)
            self._bar.update(count)

    def __enter__(self) -> _Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def resolve_profile(profile: str, out: Path, cache_dir: Path | None) -> tuple[MergeBenchProfile, Path]:
    """The named profile and the cache folder (default: `<out's folder>/.cache/merge`)."""
    if profile not in PROFILES:
        raise InvalidInput(f"unknown merge benchmark profile {profile!r}; known: {', '.join(PROFILES)}")
    return PROFILES[profile], Path(cache_dir) if cache_dir is not None else Path(
        out
    ).parent / ".cache" / "merge"


def run_merge_benchmark(
    profile: str,
    out: Path,
    datasets_dir: Path,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
    threads: int | None = None,
) -> dict[str, object]:
    """Run the merging benchmark; writes JSON to `out` and a Markdown table beside it (`.md`).

    `cache_dir` keeps the trained adapters (default: `<out's folder>/.cache/merge`). `threads` pins
    torch's CPU threads (the encoder loader otherwise uses every core); one thread per process is
    faster on a host that other jobs oversubscribe.
    """
    spec, cache = resolve_profile(profile, out, cache_dir)
    out = Path(out)
    started = time.perf_counter()
    groups = _groups(spec)
    grid_steps = sum(len(spec.grids[method]) + 1 for _, method, _ in variants())
    total = (
        2 * len(spec.tasks)
        + sum(len(group_list) for group_list in groups.values()) * grid_steps
        + sum(1 for _, method, _ in variants() if method in LOWRANK_METHODS)
        + len(variants())
        + len(FULL_FINETUNE_VARIANTS)
    )
    stage_seconds: dict[str, float] = {}
    with _Steps(total, progress) as steps:
        stage = time.perf_counter()
        tasks = {name: _split_task(Path(datasets_dir), name, spec) for name in spec.tasks}
        learnwares, train_facts = _learnwares(tasks, spec, cache / "adapters", threads, steps)
        stage_seconds["train"] = time.perf_counter() - stage

        stage = time.perf_counter()
        names = sorted({weight for learnware in learnwares.values() for weight in learnware})
        evaluator = _Evaluator(load_encoder(BASE, fresh=True), names)
        _pin_threads(threads)
        per_task = _own_accuracies(evaluator, tasks, learnwares, train_facts, spec, steps)
        stage_seconds["individual"] = time.perf_counter() - stage

        stage = time.perf_counter()
        runs = _merge_and_evaluate(
            evaluator, tasks, per_task, learnwares, groups, spec, steps, cache / "runs"
        )
        stage_seconds["merge_and_evaluate"] = time.perf_counter() - stage

        largest = groups[max(groups)][0]
        members = [learnwares[name] for name in largest]
        chosen = {
            str(run["variant"]): _params(spec, *_split_key(str(run["variant"])), _chosen_scale(run))
            for run in runs
            if run["tasks"] == list(largest)
        }
        stage = time.perf_counter()
        lowrank = {
            key: _time_lowrank_against_dense(
                members, method, chosen[key], evaluator.base, spec.timing_repeats, steps
            )
            for key, method, _ in variants()
            if method in LOWRANK_METHODS
        }
        stage_seconds["lowrank_timing"] = time.perf_counter() - stage

        stage = time.perf_counter()
        evaluator.set_updates({})
        base_state = {
            name: t.detach().clone().contiguous() for name, t in evaluator.encoder.model.state_dict().items()
        }
        streaming, full_finetune = _streaming_costs(base_state, members, chosen, cache, steps, spec.seed)
        stage_seconds["streaming"] = time.perf_counter() - stage

    base_bytes = sum(tensor.numel() * tensor.element_size() for tensor in base_state.values())
    result = _summarise(spec, groups, per_task, runs, lowrank, streaming, full_finetune, base_bytes)
    result["stage_seconds"] = stage_seconds
    result["seconds_total"] = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(merge_markdown(result))
    return result


def _split_key(key: str) -> tuple[str, bool]:
    """(method, pact) of a variant key such as `pact+iso_c`."""
    return key.removeprefix("pact+"), key.startswith("pact+")


def _chosen_scale(run: Mapping[str, object]) -> float:
    chosen = run["chosen"]
    assert isinstance(chosen, dict)
    return float(next(iter(chosen.values())))


def _learnwares(
    tasks: Mapping[str, _Task],
    spec: MergeBenchProfile,
    adapters_dir: Path,
    threads: int | None,
    steps: _Steps,
) -> tuple[dict[str, dict[str, LoraDelta]], dict[str, dict[str, float]]]:
    """Each task's LoRA learnware as factors (trained now or read from the cache) and its training facts."""
    base_sha = load_encoder(BASE).sha256
    learnwares: dict[str, dict[str, LoraDelta]] = {}
    facts: dict[str, dict[str, float]] = {}
    for name, task in tasks.items():
        folder = adapters_dir / _adapter_key(task, spec, base_sha)
        facts[name] = _train_adapter(task, spec, folder, threads)
        learnwares[name] = read_lora_adapter(folder)
        steps.step(f"learnware {name}")
    return learnwares, facts


def _own_accuracies(
    evaluator: _Evaluator,
    tasks: Mapping[str, _Task],
    learnwares: Mapping[str, Mapping[str, LoraDelta | Tensor]],
    train_facts: Mapping[str, Mapping[str, float]],
    spec: MergeBenchProfile,
    steps: _Steps,
) -> dict[str, dict[str, float]]:
    """Zero-shot base and each task's own learnware (LoRA factors or dense task vectors) on its test
    (and dev) split."""
    per_task: dict[str, dict[str, float]] = {}
    for name, task in tasks.items():
        evaluator.prepare(task, spec.max_tokens)
        zero_shot = evaluator.accuracy(task, "test")
        evaluator.set_updates(_dense_updates(learnwares[name]))
        per_task[name] = {
            "own_test": evaluator.accuracy(task, "test"),
            "own_dev": evaluator.accuracy(task, "dev"),
            "zero_shot_test": zero_shot,
            "test_examples": float(len(task.test)),
            "dev_examples": float(len(task.dev)),
            **train_facts[name],
        }
        evaluator.set_updates({})
        steps.step(f"own accuracy {name}")
    return per_task


def _run_cache_file(
    cache: Path | None, spec: MergeBenchProfile, group: Sequence[str], key: str, method: str
) -> Path | None:
    """Where one (group, variant) run is kept: named by everything that decides its result."""
    if cache is None:
        return None
    decided = {k: v for k, v in asdict(spec).items() if k not in ("name", "tasks", "grids", "timing_repeats")}
    decided.update(grid=spec.grids[method], group=list(group), variant=key)
    digest = hashlib.sha256(json.dumps(decided, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache / f"{key}-{'-'.join(group)}-{digest}.json"


# One (group, variant)'s dev score as a function of its scale (see `_tune_on_dev`).
DevScore = Callable[[float], tuple[float, dict[str, Tensor]]]
# Prepares a (group, method, pact) for tuning: its dev score, and facts its run records.
Scorer = Callable[[Sequence[str], str, bool], tuple[DevScore, dict[str, object]]]


def evaluate_variants(
    evaluator: _Evaluator,
    tasks: Mapping[str, _Task],
    per_task: Mapping[str, Mapping[str, float]],
    groups: Mapping[int, list[tuple[str, ...]]],
    spec: MergeBenchProfile,
    steps: _Steps,
    scorer: Scorer,
    cache: Path | None = None,
    only: Sequence[tuple[str, str, bool]] | None = None,
) -> list[dict[str, object]]:
    """Every variant (or those in `only`) on every group: λ/α chosen on dev, then test accuracy
    at that choice; `scorer` says how a group is merged (LoRA factors, full task vectors).

    With ``cache``, each finished (group, variant) run is kept, so an interrupted benchmark
    resumes where it stopped (runs are deterministic given the profile).
    """
    runs: list[dict[str, object]] = []
    for size, group_list in groups.items():
        for group in group_list:
            for key, method, pact in variants() if only is None else only:
                kept = _run_cache_file(cache, spec, group, key, method)
                if kept is not None and kept.is_file():
                    runs.append(json.loads(kept.read_text()))
                    steps.step(f"{key} ×{size} (cached)", len(spec.grids[method]) + 1)
                    continue
                score, facts = scorer(group, method, pact)
                best_scale, curve, best_updates = _tune_on_dev(
                    score,
                    spec.grids[method],
                    spec.grid_extensions,
                    steps,
                    f"{key} ×{size} {scale_param(method)}",
                    _scale_bounds(method),
                )
                del score  # it may hold the group's whole merge (full fine-tunes)
                evaluator.set_updates(best_updates)
                test = {name: evaluator.accuracy(tasks[name], "test") for name in group}
                runs.append(
                    {
                        "variant": key,
                        "group_size": size,
                        "tasks": list(group),
                        "chosen": {scale_param(method): best_scale},
                        "dev_normalized_accuracy": curve[best_scale],
                        "dev_curve": {str(scale): value for scale, value in sorted(curve.items())},
                        "test_accuracy": test,
                        "normalized_accuracy": {
                            name: test[name] / per_task[name]["own_test"] for name in group
                        },
                        **facts,
                    }
                )
                if kept is not None:
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    partial_file = kept.with_suffix(".partial")
                    partial_file.write_text(json.dumps(runs[-1]))
                    partial_file.replace(kept)
                steps.step(f"{key} ×{size} test")
    evaluator.set_updates({})
    return runs


def _merge_and_evaluate(
    evaluator: _Evaluator,
    tasks: Mapping[str, _Task],
    per_task: Mapping[str, Mapping[str, float]],
    learnwares: Mapping[str, dict[str, LoraDelta]],
    groups: Mapping[int, list[tuple[str, ...]]],
    spec: MergeBenchProfile,
    steps: _Steps,
    cache: Path | None = None,
    only: Sequence[tuple[str, str, bool]] | None = None,
) -> list[dict[str, object]]:
    """`evaluate_variants` on LoRA learnwares, merged in factor space at every scale tried."""

    def scorer(group: Sequence[str], method: str, pact: bool) -> tuple[DevScore, dict[str, object]]:
        members = [learnwares[name] for name in group]
        return partial(_dev_score, evaluator, tasks, per_task, spec, members, group, method, pact), {}

    return evaluate_variants(evaluator, tasks, per_task, groups, spec, steps, scorer, cache, only)


def _time_lowrank_against_dense(
    members: Sequence[Mapping[str, LoraDelta]],
    method: str,
    params: dict[str, object],
    base_weights: Mapping[str, Tensor],
    repeats: int,
    steps: _Steps,
) -> dict[str, float]:
    """Seconds of the low-rank path (factors out) and of the dense path (dense τ in, per weight),
    and the largest relative difference between their results."""
    spec = get_method(method)
    resolved = spec.resolve(params)
    names = sorted({name for member in members for name in member})
    dense_taus = {
        name: [
            member[name].dense() if name in member else torch.zeros(base_weights[name].shape)
            for member in members
        ]
        for name in names
    }
    lowrank_seconds, factors = _timed(
        repeats, lambda: merge_lora(members, method, params, base_weights=base_weights)
    )
    dense_seconds, dense = _timed(
        repeats,
        lambda: {
            name: merge_delta(name, base_weights[name], dense_taus[name], spec, resolved) for name in names
        },
    )
    worst = 0.0
    for name in names:
        difference = torch.linalg.norm(dense_update(factors[name]) - dense[name])
        worst = max(worst, float(difference / torch.linalg.norm(dense[name]).clamp(min=1e-30)))
    steps.step(f"low-rank timing {'pact+' if params.get('pact') else ''}{method}")
    return {
        "lowrank_seconds": lowrank_seconds,
        "dense_seconds": dense_seconds,
        "speedup": dense_seconds / lowrank_seconds,
        "max_relative_difference": worst,
    }


FULL_FINETUNE_VARIANTS = ("task_arithmetic", "ties", "dare", "tsv_m", "iso_c", "iso_cts", "pact+iso_c")
"""Variants whose streaming cost is also measured on checkpoints where every tensor moved."""

FULL_FINETUNE_NOISE = 1e-3
"""Relative size of the seeded perturbation of every tensor in the full-fine-tune checkpoints."""


def _streaming_costs(
    base_state: Mapping[str, Tensor],
    members: Sequence[Mapping[str, LoraDelta]],
    chosen: Mapping[str, dict[str, object]],
    cache: Path,
    steps: _Steps,
    seed: int,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Streaming-driver seconds and peak memory per variant, each in a fresh process, on (1) the base
    and the learnwares merged into full checkpoints (only query/value differ) and (2) the same with
    every tensor of every checkpoint perturbed, as after full fine-tuning."""
    cache.mkdir(parents=True, exist_ok=True)
    lora: dict[str, dict[str, float]] = {}
    full: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=cache, prefix="streaming-") as scratch:
        folder = Path(scratch)
        base_path = folder / "base.safetensors"
        save_file(dict(base_state), str(base_path))
        lora_paths, full_paths = [], []
        generator = torch.Generator().manual_seed(seed)
        for index, member in enumerate(members):
            tuned = dict(base_state)
            for name, delta in member.items():
                tuned[name] = (base_state[name] + delta.dense()).contiguous()
            lora_paths.append(folder / f"lora{index}.safetensors")
            save_file(tuned, str(lora_paths[-1]))
            for name, tensor in tuned.items():
                if tensor.is_floating_point():
                    noise = torch.randn(tensor.shape, generator=generator) * FULL_FINETUNE_NOISE
                    tuned[name] = (tensor + noise * tensor.std().clamp(min=1e-3)).contiguous()
            full_paths.append(folder / f"full{index}.safetensors")
            save_file(tuned, str(full_paths[-1]))
            del tuned
        for key, _, _ in variants():
            method, _ = _split_key(key)
            lora[key] = measure_in_fresh_process(
                base_path, lora_paths, method, chosen[key], torch.get_num_threads()
            )
            steps.step(f"streaming {key} {lora[key]['seconds']:.1f} s")
        for key in FULL_FINETUNE_VARIANTS:
            method, _ = _split_key(key)
            full[key] = measure_in_fresh_process(
                base_path, full_paths, method, chosen[key], torch.get_num_threads()
            )
            steps.step(f"streaming (full fine-tunes) {key} {full[key]['seconds']:.1f} s")
    return lora, full


def size_means(
    runs: Sequence[Mapping[str, object]], key: str, sizes: Iterable[int], field: str
) -> dict[str, float]:
    """{group size: mean over the groups of that size of the mean over a group's tasks of `field`}
    for the runs of variant `key` (`field`: "normalized_accuracy" or "test_accuracy")."""
    out: dict[str, float] = {}
    for size in sizes:
        per_group = []
        for run in runs:
            if run["variant"] == key and run["group_size"] == size:
                values = run[field]
                assert isinstance(values, dict)
                per_group.append(float(np.mean(list(values.values()))))
        out[str(size)] = float(np.mean(per_group))
    return out


def _summarise(
    spec: MergeBenchProfile,
    groups: Mapping[int, list[tuple[str, ...]]],
    per_task: Mapping[str, Mapping[str, float]],
    runs: list[dict[str, object]],
    lowrank: Mapping[str, Mapping[str, float]],
    streaming: Mapping[str, Mapping[str, float]],
    full_finetune: Mapping[str, Mapping[str, float]],
    base_bytes: int,
) -> dict[str, object]:
    normalized: dict[str, dict[str, float]] = {}
    absolute: dict[str, dict[str, float]] = {}
    chosen: dict[str, dict[str, list[object]]] = {}
    for key, _, _ in variants():
        normalized[key] = size_means(runs, key, groups, "normalized_accuracy")
        absolute[key] = size_means(runs, key, groups, "test_accuracy")
        chosen[key] = {
            str(size): [run["chosen"] for run in runs if run["variant"] == key and run["group_size"] == size]
            for size in groups
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
    return {
        "benchmark": "merging",
        "profile": spec.name,
        "settings": {
            **asdict(spec),
            "grids": dict(spec.grids),
            "fixed": dict(spec.fixed),
            "pact": dict(spec.pact),
        },
        "base": BASE,
        "machine": _machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "groups": {str(size): [list(group) for group in group_list] for size, group_list in groups.items()},
        "tasks": per_task,
        "normalized_accuracy": normalized,
        "absolute_accuracy": absolute,
        "zero_shot_normalized_accuracy": zero_shot,
        "chosen_hyperparameters": chosen,
        "runs": runs,
        "lowrank_speedup": {key: values["speedup"] for key, values in lowrank.items()},
        "lowrank_timing": lowrank,
        "merge_seconds": {key: values["seconds"] for key, values in streaming.items()},
        "peak_memory_bytes": {key: int(values["peak_memory_bytes"]) for key, values in streaming.items()},
        "full_finetune": {
            "merge_seconds": {key: values["seconds"] for key, values in full_finetune.items()},
            "peak_memory_bytes": {
                key: int(values["peak_memory_bytes"]) for key, values in full_finetune.items()
            },
            "noise": FULL_FINETUNE_NOISE,
            "models": len(groups[max(groups)][0]),
        },
        "base_bytes": base_bytes,
    }


def _chosen_text(chosen: Mapping[str, Sequence[Mapping[str, object]]], sizes: Sequence[str]) -> str:
    """The chosen scales per group size, e.g. `0.7 / 0.7 / 1.4` (groups of one size joined by commas)."""
    if not chosen:
        return "–"
    return " / ".join(
        ",".join(
            f"{value:g}" for run in chosen.get(size, []) for value in run.values() if isinstance(value, float)
        )
        for size in sizes
    )


def merge_markdown(result: Mapping[str, object]) -> str:
    """The benchmark's result as Markdown: normalised and absolute accuracy per method and group
    size, time and memory of the streaming merge, the low-rank speed-up, and the learnwares."""
    normalized = result["normalized_accuracy"]
    absolute = result["absolute_accuracy"]
    zero_shot = result["zero_shot_normalized_accuracy"]
    seconds = result["merge_seconds"]
    memory = result["peak_memory_bytes"]
    base_bytes = result["base_bytes"]
    speedup = result["lowrank_speedup"]
    tasks = result["tasks"]
    chosen = result.get("chosen_hyperparameters", {})
    assert isinstance(normalized, dict) and isinstance(absolute, dict) and isinstance(zero_shot, dict)
    assert isinstance(chosen, dict)
    assert isinstance(seconds, dict) and isinstance(memory, dict) and isinstance(base_bytes, int)
    assert isinstance(speedup, dict) and isinstance(tasks, dict)
    sizes = sorted(zero_shot, key=int)
    header = (
        ["method"]
        + [f"norm. acc ×{size}" for size in sizes]
        + [f"abs. acc ×{size}" for size in sizes]
        + ["λ/α chosen on dev", "merge s (streaming)", "peak mem ÷ base", "low-rank speed-up"]
    )
    rows: list[list[object]] = []
    for key in normalized:
        rows.append(
            [f"`{key}`"]
            + [normalized[key][size] for size in sizes]
            + [absolute[key][size] for size in sizes]
            + [
                _chosen_text(chosen.get(key, {}), sizes),
                seconds.get(key, "–"),
                memory[key] / base_bytes if key in memory else "–",
                f"{speedup[key]:.1f}×" if key in speedup else "–",
            ]
        )
    rows.append(["zero-shot base"] + [zero_shot[size] for size in sizes] + ["–"] * (len(sizes) + 4))
    task_rows = [
        [name, facts["own_test"], facts["zero_shot_test"], facts["own_dev"], int(facts["test_examples"])]
        for name, facts in tasks.items()
    ]
    full = result.get("full_finetune", {})
    assert isinstance(full, dict)
    full_seconds, full_memory = full.get("merge_seconds", {}), full.get("peak_memory_bytes", {})
    full_rows = [[f"`{key}`", full_seconds[key], full_memory[key] / base_bytes] for key in full_seconds]
    return (
        "\n\n".join(
            [
                f"# Merging benchmark ({result['profile']}, {result['date']})",
                md_table(header, rows),
                f"Normalised accuracy: merged ÷ the task's own learnware on its test split, averaged over a group's "
                f"tasks and the groups of a size. Streaming merge: the largest group's learnwares merged into "
                f"full safetensors checkpoints and merged again by the streaming driver, λ/α as chosen for that "
                f"group; peak memory is the growth of that process's anonymous resident memory, against the "
                f"base's {base_bytes / 2**20:.1f} MiB of weights. Low-rank speed-up: dense path ÷ factor path, "
                f"same merge, largest group.",
                f"## Streaming merge of {full.get('models', '?')} full fine-tunes (every tensor moved)",
                md_table(["method", "merge s", "peak mem ÷ base"], full_rows)
                if full_rows
                else "Not measured.",
                "## Learnwares",
                md_table(
                    ["task", "own test acc", "zero-shot test acc", "own dev acc", "test examples"], task_rows
                ),
            ]
        )
        + "\n"
    )
