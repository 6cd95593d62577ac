"""Reusing learnwares beyond search: merge several LoRA learnwares into one, or fine-tune one
on a user's shots (PAVE♦), each written as a new peft adapter over the same base.

Both report accuracy on held-out shots where the caller gives shots, so a user can compare
the new model with the identified learnware used as it is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from app.ml.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, read_lora_adapter, save_lora_adapter
from app.ml.bases import resolve_base
from app.ml.errors import InvalidInput
from app.ml.finetune import LoraClassifier, accuracy
from app.ml.merging import LoraDelta, merge_lora
from app.ml.pooled_linear import LINEAR_DIR, LINEAR_WEIGHTS
from app.ml.progress import Progress


def _base_weights(base: str, names: set[str]) -> dict[str, torch.Tensor]:
    """The pretrained weights PACT needs, read tensor by tensor from the base's safetensors."""
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    for file in sorted(resolve_base(base).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            for key in fh.keys():  # noqa: SIM118  (safe_open has keys(), not iteration)
                name = next(
                    (n for n in names if key == n or key.endswith("." + n) or n.endswith("." + key)), None
                )
                if name is not None:
                    out[name] = fh.get_tensor(key).float()
    return out


@dataclass
class HeldOut:
    """Shots split into a part to train on and a part to measure on (stratified)."""

    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray


def split_shots(texts: Sequence[str], labels: Sequence[int], fraction: float, seed: int) -> HeldOut:
    """Hold out ``fraction`` of each class's shots (at least one where a class has two or more)."""
    if not 0.0 <= fraction < 1.0:
        raise InvalidInput(f"holdout must be within [0, 1), got {fraction}")
    y = np.asarray(labels, dtype=np.int64)
    rng = np.random.default_rng(seed)
    test_idx: list[int] = []
    for c in np.unique(y):
        pool = rng.permutation(np.flatnonzero(y == c))
        n = round(fraction * len(pool))
        if fraction > 0 and len(pool) >= 2:
            n = min(max(n, 1), len(pool) - 1)
        test_idx.extend(pool[:n].tolist())
    test = set(test_idx)
    train_idx = [i for i in range(len(y)) if i not in test]
    return HeldOut(
        [texts[i] for i in train_idx], y[train_idx], [texts[i] for i in sorted(test)], y[sorted(test)]
    )


@dataclass
class ReuseResult:
    adapter_dir: Path
    label_names: list[str]
    seconds: float
    heldout_accuracy: float | None = None
    """The new model's accuracy on the held-out shots."""
    baseline_accuracy: float | None = None
    """The first input learnware's accuracy on the same shots, used as it is."""
    details: dict[str, Any] = field(default_factory=dict)


def _heldout_accuracy(base: str, adapter_dir: Path, held: HeldOut | None, names: list[str]) -> float | None:
    if held is None or not held.test_texts:
        return None
    model = LoraClassifier.load(base, adapter_dir)
    return accuracy(model.predict_proba(held.test_texts, names), held.test_labels)


def merge_lora_learnwares(
    adapter_dirs: Sequence[Path],
    base: str,
    method: str,
    params: dict[str, object] | None,
    out_dir: Path,
    *,
    eval_names: list[str] | None = None,
    eval_shots: HeldOut | None = None,
    progress: Progress | None = None,
) -> ReuseResult:
    """Merge LoRA learnwares of ``base`` with ``method`` into one adapter written to ``out_dir``.

    Low-rank methods stay exact (rank ≤ Σr); elementwise ones (TIES, DARE) are written at the
    full rank of their dense update, so no information is cut either way.
    """
    if len(adapter_dirs) < 2:
        raise InvalidInput(f"a merge needs at least two learnwares, got {len(adapter_dirs)}")
    started = time.perf_counter()
    learnwares = [read_lora_adapter(d) for d in adapter_dirs]
    params = dict(params or {})
    base_weights = _base_weights(base, set().union(*learnwares)) if params.get("pact") else None
    merged = merge_lora(learnwares, method, params, base_weights=base_weights, progress=progress)
    deltas: dict[str, torch.Tensor] = {}
    rank = 1
    for name, update in merged.items():
        if isinstance(update, LoraDelta):
            deltas[name.removesuffix(".weight")] = update.dense()
            rank = max(rank, update.rank)
        else:
            deltas[name.removesuffix(".weight")] = update.float()
            rank = max(rank, int(torch.linalg.matrix_rank(update.double()).item()))
    errors = save_lora_adapter(out_dir, deltas, rank, base)
    names = eval_names or []
    first = Path(adapter_dirs[0])
    return ReuseResult(
        adapter_dir=out_dir,
        label_names=names,
        seconds=time.perf_counter() - started,
        heldout_accuracy=_heldout_accuracy(base, out_dir, eval_shots, names),
        baseline_accuracy=_heldout_accuracy(base, first, eval_shots, names),
        details={"rank": rank, "refactorisation_error_max": max(errors.values(), default=0.0)},
    )


def finetune_lora_learnware(
    adapter_dir: Path | None,
    base: str,
    texts: Sequence[str],
    labels: Sequence[int],
    label_names: list[str],
    out_dir: Path,
    *,
    steps: int = 30,
    lr: float = 1e-3,
    holdout: float = 0.25,
    seed: int = 0,
    progress: Progress | None = None,
) -> ReuseResult:
    """Fine-tune a LoRA learnware (or a fresh adapter of ``base``) on a user's shots (PAVE♦)."""
    if steps < 1:
        raise InvalidInput(f"steps must be at least 1, got {steps}")
    started = time.perf_counter()
    held = split_shots(texts, labels, holdout, seed)
    if len(set(held.train_labels.tolist())) < 2:
        raise InvalidInput("after holding out shots, the training part covers a single class")
    model = (
        LoraClassifier.new(base, seed=seed)
        if adapter_dir is None
        else LoraClassifier.load(base, Path(adapter_dir), trainable=True)
    )
    baseline = (
        accuracy(model.predict_proba(held.test_texts, label_names), held.test_labels)
        if held.test_texts
        else None
    )
    losses = model.fit(
        held.train_texts, held.train_labels, label_names, steps=steps, lr=lr, seed=seed, progress=progress
    )
    model.save(out_dir)
    after = (
        accuracy(model.predict_proba(held.test_texts, label_names), held.test_labels)
        if held.test_texts
        else None
    )
    return ReuseResult(
        adapter_dir=out_dir,
        label_names=label_names,
        seconds=time.perf_counter() - started,
        heldout_accuracy=after,
        baseline_accuracy=baseline,
        details={
            "steps": steps,
            "n_train": len(held.train_texts),
            "n_heldout": len(held.test_texts),
            "final_loss": losses[-1],
        },
    )


def package_model(
    model_dir: Path,
    out_zip: Path,
    *,
    model_format: Literal["peft-lora", "hf-seqcls", "pooled-linear"],
    name: str,
    description: str,
    label_names: list[str],
    base: str,
    inputs: Sequence[str],
    license: str,
    tags: Sequence[str] = (),
) -> Path:
    """Write a reuse job's model as a learnware package naming its base by alias: an adapter
    folder (``peft-lora``), a transformers sequence-classification directory (``hf-seqcls``) or
    a folder holding a linear map after the base's pooling (``pooled-linear``)."""
    from app.ml.packages import Manifest, build_package, files_under, inputs_jsonl

    manifest = Manifest.model_validate(
        {
            "name": name,
            "description": description,
            "tags": list(tags),
            "task_type": "text-classification",
            "label_names": label_names,
            "model_format": model_format,
            "base_model": base,
            "license": license,
            "inputs": "inputs.jsonl",
        }
    )
    files: dict[str, Path | bytes]
    if model_format == "peft-lora":
        config = json.loads((Path(model_dir) / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = base
        files = {
            f"adapter/{ADAPTER_CONFIG}": json.dumps(config, indent=2, sort_keys=True).encode(),
            f"adapter/{ADAPTER_WEIGHTS}": Path(model_dir) / ADAPTER_WEIGHTS,
        }
    elif model_format == "pooled-linear":
        files = {f"{LINEAR_DIR}/{LINEAR_WEIGHTS}": Path(model_dir) / LINEAR_WEIGHTS}
    else:
        files = dict(files_under(Path(model_dir), "model"))
    return build_package(out_zip, manifest, {**files, "inputs.jsonl": inputs_jsonl(inputs)})
