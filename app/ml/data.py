"""Text-classification tasks from the shared datasets folder, and few-shot sampling.

Layout: ``<dir>/<task>/{train,dev?,test}.jsonl`` with ``{"text", "label"}`` per line
(``text_b`` for sentence pairs, ``topic`` for stance) and ``labels.json`` with the class names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.ml.errors import InvalidInput


@dataclass(frozen=True)
class TextTask:
    name: str
    split: str
    texts: list[str]
    labels: np.ndarray
    label_names: list[str]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, idx: np.ndarray | list[int]) -> TextTask:
        ids = np.asarray(idx, dtype=np.int64)
        return TextTask(
            self.name, self.split, [self.texts[i] for i in ids], self.labels[ids], self.label_names
        )


def _row_text(row: dict[str, object]) -> str:
    text = str(row["text"])
    if row.get("text_b"):
        text = f"{text} [SEP] {row['text_b']}"
    if row.get("topic"):
        text = f"{row['topic']}: {text}"
    return text


def text_task_names(datasets_dir: Path) -> list[str]:
    return sorted(p.parent.name for p in Path(datasets_dir).glob("*/train.jsonl"))


def load_task(
    datasets_dir: Path, name: str, split: str = "train", limit: int | None = None, seed: int = 0
) -> TextTask:
    """Load one split; with ``limit``, a seeded random subset of that size."""
    folder = Path(datasets_dir) / name
    path = folder / f"{split}.jsonl"
    if not path.is_file():
        raise InvalidInput(f"no split {split!r} for task {name!r} under {datasets_dir}")
    label_names = json.loads((folder / "labels.json").read_text())
    texts: list[str] = []
    labels: list[int] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            text = _row_text(row)
            if text.strip():
                texts.append(text)
                labels.append(int(row["label"]))
    task = TextTask(name, split, texts, np.asarray(labels, dtype=np.int64), [str(n) for n in label_names])
    if limit is not None and limit < len(task):
        rng = np.random.default_rng(seed)
        task = task.subset(np.sort(rng.choice(len(task), size=limit, replace=False)))
    return task


def few_shot(task: TextTask, per_class: int = 8, max_total: int = 64, seed: int = 0) -> TextTask:
    """k shots per class (fewer where a class has fewer), at most ``max_total`` in all.

    With more classes than ``max_total // per_class`` allows, classes are sampled so every
    chosen class keeps at least one shot (the many-class case of the benchmark).
    """
    rng = np.random.default_rng(seed)
    classes = np.unique(task.labels)
    k = max(1, min(per_class, max_total // max(1, len(classes))))
    chosen: list[int] = []
    for c in rng.permutation(classes):
        pool = np.flatnonzero(task.labels == c)
        take = rng.choice(pool, size=min(k, len(pool)), replace=False)
        chosen.extend(take.tolist())
        if len(chosen) >= max_total:
            break
    return task.subset(np.asarray(sorted(chosen[:max_total])))
