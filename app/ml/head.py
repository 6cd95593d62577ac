"""The label-name head: maps features to any label set without training.

logits_c = cos(pool(f(x)), e_c) / T, where e_c = pool(f_θ0(name_c)) embeds the class name
with the frozen base. The same head serves every spec space, every LoRA learnware and the
user's task, which is what lets a model and a task be compared whatever their label sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from app.ml.encoders import Encoder, embed_texts
from app.ml.errors import InvalidInput


def check_label_names(label_names: Sequence[str]) -> list[str]:
    """At least two distinct, non-empty class names."""
    names = [str(n).strip() for n in label_names]
    if len(names) < 2:
        raise InvalidInput(f"need at least two label names, got {len(names)}")
    if any(not n for n in names):
        raise InvalidInput("label names must be non-empty")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidInput(f"duplicate label names: {duplicates}")
    return names


def class_ids(labels: Sequence[int] | Sequence[str], names: list[str]) -> list[int]:
    """Labels given as ids or as names, as ids; refuses unknown ones and a single class."""
    if all(isinstance(label, str) for label in labels):
        index = {name: i for i, name in enumerate(names)}
        unknown = sorted({str(label) for label in labels if label not in index})
        if unknown:
            raise InvalidInput(f"labels {unknown} are not among the label names {names}")
        ids = [index[str(label)] for label in labels]
    else:
        ids = [int(label) for label in labels]
        bad = sorted({i for i in ids if not 0 <= i < len(names)})
        if bad:
            raise InvalidInput(f"label ids {bad} are out of range for {len(names)} label names")
    if len(set(ids)) < 2:
        raise InvalidInput("the examples cover a single class: a task spec needs at least two")
    return ids


class LabelNameHead:
    """Cosine similarity to frozen class-name embeddings, divided by a temperature."""

    def __init__(self, label_embeddings: torch.Tensor, temperature: float, label_names: Sequence[str]):
        if temperature <= 0:
            raise InvalidInput(f"temperature must be positive, got {temperature}")
        self.label_names = list(label_names)
        self.temperature = float(temperature)
        self.embeddings = F.normalize(label_embeddings.float(), dim=-1)

    @classmethod
    def from_names(
        cls, encoder: Encoder, label_names: Sequence[str], temperature: float = 0.05, max_tokens: int = 32
    ) -> LabelNameHead:
        """Embed the class names with the frozen base (never with a learnware's adapter)."""
        names = check_label_names(label_names)
        emb = embed_texts(encoder, names, max_tokens=max_tokens)
        return cls(emb, temperature, names)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        emb = self.embeddings.to(device=features.device, dtype=features.dtype)
        return F.normalize(features, dim=-1) @ emb.T / self.temperature

    def __len__(self) -> int:
        return len(self.label_names)
