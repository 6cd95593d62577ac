"""Transfer benchmark (BENCHMARK.md, "Transfer"): MiniLM-L6 learnwares moved to MPNet-base, or
the other way (``source_base``/``target_base``: MPNet-base learnwares moved to MiniLM-L6).

Per task: a source learnware (LoRA r = 8 on the source base's query/value with the label-name
head, trained on the task's train split), N calibration examples drawn from the train split
(nested: the first 16 of the 64, the first 64 of the 256, so one calibration pass serves all
N), and accuracy on the test split of

- the target zero-shot (the frozen target base with the label-name head),
- every transfer method applied to the target (no training),
- the target fine-tuned directly on the same N labelled examples (LoRA r = 8 on q/v),
- the source learnware itself (on its own base).

When the source is deeper than the target (MPNet's 12 layers → MiniLM's 6), the benchmark's
``bico`` folds every source layer into its nearest target layer (``layers="all"`` of
``layer_pairs``) and ``bico_nearest`` keeps one source layer per target layer (the transfer
job's default), both from the same calibration pass; the other adapter methods fold.

Reported averages over tasks: ``gain_over_zero_shot`` = mean(acc − zero-shot) and
``share_of_finetune_gain`` = mean(acc − zero-shot) / mean(fine-tune − zero-shot), per method
and N (the ratio of averaged gains: per-task ratios explode where fine-tuning gains nothing).
``transfer_seconds`` is the time of one transfer: the calibration pass over N examples (forward
and backward through both bases; the benchmark shares one pass, so forward-only methods are
charged the backward too) plus the method's own solve. Trained source adapters and finished
tasks are cached, so a second run is quick.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.ml.data import TextTask, load_task
from app.ml.encoders import Encoder, embed_texts, load_encoder
from app.ml.errors import InvalidInput
from app.ml.finetune import LoraClassifier
from app.ml.head import LabelNameHead
from app.ml.mpnet import MPNET_ALIAS
from app.ml.progress import Progress
from app.ml.transfer.bico import (
    MODE_SIDES,
    BicoMode,
    CrossStats,
    LayerMap,
    LayerPair,
    Statistic,
    collect_cross_stats,
    layer_pairs,
    transfer_task_vector,
)
from app.ml.transfer.taskvec import TaskVector, linear_modules, load_lora_task_vector, merged_deltas
from app.ml.transfer.utd import operator_from_features
from app.settings import get_settings

ADAPTER_METHODS: tuple[BicoMode, ...] = ("bico", "theseus", "input_only", "output_only", "naive")
# Benchmark-only variants of an adapter method: (mode, layer map).
LAYER_VARIANTS: dict[str, tuple[BicoMode, LayerMap]] = {"bico_nearest": ("bico", "nearest")}


@dataclass(frozen=True)
class TransferProfile:
    """Everything a benchmark run depends on (hashed into the cache key, tasks aside)."""

    name: str
    tasks: tuple[str, ...]
    ns: tuple[int, ...] = (16, 64, 256)
    methods: tuple[str, ...] = ("bico", "theseus", "naive", "utd")
    test_limit: int = 200
    source_base: str = "all-MiniLM-L6-v2"
    target_base: str = MPNET_ALIAS
    source_steps: int = 100
    lr: float = 1e-3
    lora_rank: int = 8
    lora_alpha: float = 16.0
    batch_size: int = 16
    finetune_epochs: float = 2.0
    finetune_min_steps: int = 10
    finetune_max_steps: int = 24
    max_tokens: int = 64
    temperature: float = 0.05
    seed: int = 0

    def finetune_steps(self, n: int) -> int:
        """Steps of the direct fine-tune on n examples: epochs·n/batch, clamped."""
        steps = math.ceil(self.finetune_epochs * n / self.batch_size)
        return max(self.finetune_min_steps, min(self.finetune_max_steps, steps))

    def source_key(self) -> str:
        """What the source learnware depends on: a profile change elsewhere keeps it cached."""
        fields = ("source_base", "source_steps", "lr", "lora_rank", "lora_alpha", "batch_size", "max_tokens")
        data = {f: getattr(self, f) for f in (*fields, "temperature", "seed")}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]

    def cache_key(self) -> str:
        data = asdict(self)
        data.pop("name")
        data.pop("tasks")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


PROFILES: dict[str, TransferProfile] = {
    "quick": TransferProfile(
        name="quick",
        tasks=("sst2", "mpqa", "trec", "snips", "sms_spam", "tweet_emotion", "subj", "uci_yelp"),
        test_limit=100,
    ),
    # All 14 tasks with at least 256 training examples and every adapter method; test sets and
    # fine-tune budgets as in quick, so that it runs in about two hours on a 2-core CPU.
    "full": TransferProfile(
        name="full",
        tasks=(
            "sst2",
            "mr",
            "cr",
            "mpqa",
            "subj",
            "trec",
            "snips",
            "sms_spam",
            "ag_news",
            "sst5",
            "tweet_emotion",
            "tweet_sentiment",
            "tweet_offensive",
            "uci_yelp",
        ),
        methods=("bico", "theseus", "input_only", "output_only", "naive", "utd"),
        test_limit=100,
    ),
}


def get_profile(profile: str | TransferProfile) -> TransferProfile:
    if isinstance(profile, TransferProfile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise InvalidInput(
            f"unknown transfer benchmark profile {profile!r}; known: {', '.join(PROFILES)}"
        ) from None


def _accuracy(logits: torch.Tensor, labels: np.ndarray) -> float:
    return float((logits.argmax(dim=-1).numpy() == labels).mean())


def _source_adapter(p: TransferProfile, train: TextTask, cache: Path, progress: Progress | None) -> Path:
    """Train (once, cached) the source learnware: LoRA on the source base, label-name head."""
    folder = cache / "source" / f"{train.name}-{p.source_key()}"
    if (folder / "adapter_model.safetensors").is_file():
        return folder
    classifier = LoraClassifier.new(p.source_base, rank=p.lora_rank, alpha=p.lora_alpha, seed=p.seed)
    classifier.max_tokens = p.max_tokens
    classifier.temperature = p.temperature
    classifier.fit(
        train.texts,
        train.labels,
        train.label_names,
        steps=p.source_steps,
        lr=p.lr,
        batch_size=p.batch_size,
        seed=p.seed,
        progress=progress,
    )
    # A private temporary folder: two runs sharing the cache may train the same source at once.
    tmp = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    classifier.save(tmp)
    try:
        tmp.rename(folder)
    except OSError:
        if not (folder / "adapter_model.safetensors").is_file():
            raise
        shutil.rmtree(tmp)  # the other run finished first; its adapter is the same training
    return folder


def _finetune_accuracy(p: TransferProfile, calib: TextTask, test: TextTask) -> float:
    classifier = LoraClassifier.new(p.target_base, rank=p.lora_rank, alpha=p.lora_alpha, seed=p.seed)
    classifier.max_tokens = p.max_tokens
    classifier.temperature = p.temperature
    classifier.fit(
        calib.texts,
        calib.labels,
        calib.label_names,
        steps=p.finetune_steps(len(calib)),
        lr=p.lr,
        batch_size=p.batch_size,
        seed=p.seed,
    )
    probs = classifier.predict_proba(test.texts, test.label_names)
    return float((probs.argmax(axis=1) == test.labels).mean())


def _adapter_mode(method: str) -> tuple[BicoMode, LayerMap]:
    """The BiCo mode and layer map of an adapter method of the benchmark."""
    if method in LAYER_VARIANTS:
        return LAYER_VARIANTS[method]
    # Fold every source layer (a no-op unless the source is deeper; kept so cached results hold).
    return next(m for m in ADAPTER_METHODS if m == method), "all"


def _statistics(methods: Sequence[str]) -> list[Statistic]:
    modes = [_adapter_mode(m)[0] for m in methods]
    wanted = {s for m in modes for s in MODE_SIDES[m] if s is not None}
    return [s for s in ("act_in", "grad_out", "act_out") if s in wanted]


def _run_task(
    p: TransferProfile,
    task_name: str,
    datasets_dir: Path,
    cache: Path,
    source: Encoder,
    target: Encoder,
    report: Callable[[str], None],
) -> dict[str, Any]:
    """All accuracies and timings of one task."""
    train = load_task(datasets_dir, task_name, "train")
    test = load_task(datasets_dir, task_name, "test", limit=p.test_limit, seed=p.seed)
    names = train.label_names
    n_max = max(p.ns)
    if n_max > len(train):
        raise InvalidInput(f"task {task_name!r} has {len(train)} training examples, fewer than N = {n_max}")
    order = np.random.default_rng(p.seed + 1).permutation(len(train))[:n_max]
    calib = train.subset(order)

    report("source learnware")
    adapter = _source_adapter(p, train, cache, None)
    tv: TaskVector = load_lora_task_vector(adapter, source.model_type)
    head_src = LabelNameHead.from_names(source, names, p.temperature)
    head_tgt = LabelNameHead.from_names(target, names, p.temperature)
    with merged_deltas(source.model, source.model_type, tv.deltas):
        source_acc = _accuracy(
            head_src.logits(embed_texts(source, test.texts, max_tokens=p.max_tokens)), test.labels
        )

    report("target zero-shot")
    emb_zero = embed_texts(target, test.texts, max_tokens=p.max_tokens)
    zero_acc = _accuracy(head_tgt.logits(emb_zero), test.labels)

    accuracy: dict[str, dict[str, float]] = {m: {} for m in (*p.methods, "finetune")}
    seconds: dict[str, dict[str, float]] = {m: {} for m in p.methods}
    bico_methods = [m for m in p.methods if m in ADAPTER_METHODS or m in LAYER_VARIANTS]
    statistics = _statistics(bico_methods)
    pairs_of: dict[LayerMap, list[LayerPair]] = {
        layers: layer_pairs(tv, source.num_layers, target.num_layers, target.model_type, layers)
        for layers in ("all", "nearest")
    }
    pairs = pairs_of["all"]  # nearest's pairs are among them: one calibration pass serves both
    assert set(pairs_of["nearest"]) <= set(pairs)
    snapshots: list[CrossStats | None] = [None] * len(p.ns)
    if statistics:
        report("calibration pass")
        stats_list = collect_cross_stats(
            source,
            target,
            pairs,
            calib.texts,
            calib.labels.tolist(),
            names,
            statistics=statistics,
            checkpoints=p.ns,
            batch_size=p.batch_size,
            max_tokens=p.max_tokens,
            temperature=p.temperature,
        )
        ends = sorted(p.ns)
        snapshots = [stats_list[ends.index(n)] for n in p.ns]
    target_shapes = {
        key: module.weight.shape
        for key, module in linear_modules(
            target.model, target.model_type, [pr.target for pr in pairs]
        ).items()
    }
    for k, n in enumerate(p.ns):
        key = str(n)
        for method in bico_methods:
            report(f"{method}, N = {n}")
            mode, layers = _adapter_mode(method)
            started = time.perf_counter()
            tv_b, _ = transfer_task_vector(
                tv, pairs_of[layers], target_shapes, mode, snapshots[k], target.model_type
            )
            solve = time.perf_counter() - started
            snapshot = snapshots[k]
            pass_seconds = (
                snapshot.seconds if snapshot is not None and MODE_SIDES[mode] != (None, None) else 0.0
            )
            seconds[method][key] = round(solve + pass_seconds, 3)
            with merged_deltas(target.model, target.model_type, tv_b.deltas):
                emb = embed_texts(target, test.texts, max_tokens=p.max_tokens)
            accuracy[method][key] = _accuracy(head_tgt.logits(emb), test.labels)
        if "utd" in p.methods:
            report(f"utd, N = {n}")
            probes = calib.texts[:n]
            started = time.perf_counter()
            with merged_deltas(source.model, source.model_type, tv.deltas):
                f_ft = embed_texts(source, probes, max_tokens=p.max_tokens)
            f_pre = embed_texts(source, probes, max_tokens=p.max_tokens)
            f_tgt = embed_texts(target, probes, max_tokens=p.max_tokens)
            op, _ = operator_from_features(f_ft, f_pre, head_src.embeddings, f_tgt, head_tgt.embeddings)
            seconds["utd"][key] = round(time.perf_counter() - started, 3)
            accuracy["utd"][key] = _accuracy(head_tgt.logits(op.apply(emb_zero)), test.labels)
        report(f"direct fine-tune, N = {n}")
        accuracy["finetune"][key] = _finetune_accuracy(p, calib.subset(np.arange(n)), test)
    return {
        "n_test": len(test),
        "n_classes": len(names),
        "source": source_acc,
        "zero_shot": zero_acc,
        "accuracy": accuracy,
        "transfer_seconds": seconds,
        "finetune_steps": {str(n): p.finetune_steps(n) for n in p.ns},
    }


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def summarise(p: TransferProfile, tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Averages over tasks: accuracy, gain over zero-shot, share of the fine-tune's gain, seconds."""
    rows = list(tasks.values())
    zero = [t["zero_shot"] for t in rows]
    ns = [str(n) for n in p.ns]
    mean_acc: dict[str, Any] = {"source": _mean([t["source"] for t in rows]), "zero_shot": _mean(zero)}
    gain: dict[str, dict[str, float]] = {}
    share: dict[str, dict[str, float]] = {}
    ft_gain = {n: _mean([t["accuracy"]["finetune"][n] - t["zero_shot"] for t in rows]) for n in ns}
    for method in (*p.methods, "finetune"):
        mean_acc[method] = {n: _mean([t["accuracy"][method][n] for t in rows]) for n in ns}
        gain[method] = {n: _mean([t["accuracy"][method][n] - t["zero_shot"] for t in rows]) for n in ns}
        share[method] = {n: gain[method][n] / ft_gain[n] if ft_gain[n] > 0 else float("nan") for n in ns}
    gain["source"] = dict.fromkeys(ns, mean_acc["source"] - mean_acc["zero_shot"])
    share["source"] = {n: gain["source"][n] / ft_gain[n] if ft_gain[n] > 0 else float("nan") for n in ns}
    seconds = {m: {n: _mean([t["transfer_seconds"][m][n] for t in rows]) for n in ns} for m in p.methods}
    return {
        "mean_accuracy": mean_acc,
        "gain_over_zero_shot": gain,
        "share_of_finetune_gain": share,
        "transfer_seconds": seconds,
    }


def _machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }


def run_transfer_benchmark(
    profile: str | TransferProfile,
    out: Path,
    datasets_dir: Path,
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
    tasks: Sequence[str] | None = None,
    source_base: str | None = None,
    target_base: str | None = None,
) -> dict[str, Any]:
    """Run the transfer benchmark; write ``out`` (JSON) and ``out`` with suffix .md; return the JSON.

    ``cache_dir`` (default ``<data dir>/cache/bench-transfer``) keeps trained source adapters
    and finished tasks; ``tasks`` overrides the profile's task list, ``source_base`` and
    ``target_base`` its bases (the other direction: MPNet → MiniLM).
    """
    p = get_profile(profile)
    if tasks is not None:
        p = replace(p, tasks=tuple(tasks))
    p = replace(p, source_base=source_base or p.source_base, target_base=target_base or p.target_base)
    if p.source_base == p.target_base:
        raise InvalidInput(f"source and target base are both {p.source_base!r}; a transfer needs two bases")
    if len(p.tasks) == 0:
        raise InvalidInput("no tasks to benchmark")
    cache = Path(cache_dir) if cache_dir is not None else get_settings().data_dir / "cache" / "bench-transfer"
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    source = load_encoder(p.source_base, fresh=True)
    target = load_encoder(p.target_base, fresh=True)
    if source.num_layers > target.num_layers and "bico" in p.methods and "bico_nearest" not in p.methods:
        # A deeper source: also measure BiCo without folding layers (one source layer per target layer).
        p = replace(p, methods=(*p.methods, "bico_nearest"))
    stages = 3 + len(p.ns) * (len(p.methods) + 1)
    results: dict[str, dict[str, Any]] = {}
    for t, task_name in enumerate(p.tasks):
        done_file = (
            cache / "results" / f"{task_name}-{p.cache_key()}-{source.sha256[:8]}-{target.sha256[:8]}.json"
        )
        if done_file.is_file():
            results[task_name] = json.loads(done_file.read_text())
            if progress:
                progress((t + 1) * stages, len(p.tasks) * stages, f"{task_name}: cached")
            continue
        stage = [t * stages]

        def report(message: str, task_name: str = task_name, stage: list[int] = stage) -> None:
            stage[0] += 1
            if progress:
                progress(
                    min(stage[0], len(p.tasks) * stages), len(p.tasks) * stages, f"{task_name}: {message}"
                )

        task_started = time.perf_counter()
        result = _run_task(p, task_name, Path(datasets_dir), cache, source, target, report)
        result["seconds"] = round(time.perf_counter() - task_started, 1)
        done_file.parent.mkdir(parents=True, exist_ok=True)
        done_file.write_text(json.dumps(result, indent=2, sort_keys=True))
        results[task_name] = result
    summary = summarise(p, results)
    report_json: dict[str, Any] = {
        "benchmark": "transfer",
        "profile": p.name,
        "settings": asdict(p),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": _machine(),
        "source_base_sha256": source.sha256,
        "target_base_sha256": target.sha256,
        **summary,
        "tasks": results,
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report_json, indent=2, sort_keys=True))
    out.with_suffix(".md").write_text(markdown_table(report_json))
    return report_json


def _fmt(value: float, pct: bool = True) -> str:
    if value != value:  # NaN
        return "–"
    return f"{100 * value:.1f}" if pct else f"{value:.2f}"


def markdown_table(report: dict[str, Any]) -> str:
    """The summary and per-task tables of a benchmark report, in Markdown."""
    settings = report["settings"]
    ns = [str(n) for n in settings["ns"]]
    methods = list(settings["methods"])
    acc, gain, share = (
        report["mean_accuracy"],
        report["gain_over_zero_shot"],
        report["share_of_finetune_gain"],
    )
    head = (
        "| method | " + " | ".join(f"acc N={n}" for n in ns) + " | " + " | ".join(f"gain N={n}" for n in ns)
    )
    head += " | " + " | ".join(f"share N={n}" for n in ns) + " | " + " | ".join(f"s N={n}" for n in ns) + " |"
    lines = [
        f"Mean over {len(report['tasks'])} tasks ({', '.join(report['tasks'])}); accuracy and gain in points, "
        "share = mean gain / mean gain of the direct fine-tune, s = seconds per transfer.",
        "",
        head,
        "|" + "---|" * (1 + 4 * len(ns)),
    ]
    blank = " | ".join("" for _ in ns)
    lines.append(
        f"| target zero-shot | {' | '.join(_fmt(acc['zero_shot']) for _ in ns)} | {blank} | {blank} | {blank} |"
    )
    for method in [*methods, "finetune"]:
        label = "target fine-tuned on the N examples" if method == "finetune" else method
        secs = (
            " | ".join(_fmt(report["transfer_seconds"][method][n], pct=False) for n in ns)
            if method != "finetune"
            else blank
        )
        lines.append(
            f"| {label} | "
            + " | ".join(_fmt(acc[method][n]) for n in ns)
            + " | "
            + " | ".join(_fmt(gain[method][n]) for n in ns)
            + " | "
            + " | ".join(_fmt(share[method][n], pct=False) for n in ns)
            + f" | {secs} |"
        )
    lines.append(
        f"| source learnware ({settings['source_base']}) | {' | '.join(_fmt(acc['source']) for _ in ns)} | "
        + " | ".join(_fmt(gain["source"][n]) for n in ns)
        + " | "
        + " | ".join(_fmt(share["source"][n], pct=False) for n in ns)
        + f" | {blank} |"
    )
    lines += ["", "Per task, accuracy (%) at N = " + ", ".join(ns) + ":", ""]
    cols = ["source", "zero-shot", *methods, "finetune"]
    lines.append("| task | " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * (1 + len(cols)))
    for name, task in report["tasks"].items():
        cells = [_fmt(task["source"]), _fmt(task["zero_shot"])]
        for method in [*methods, "finetune"]:
            cells.append(" / ".join(_fmt(task["accuracy"][method][n]) for n in ns))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
