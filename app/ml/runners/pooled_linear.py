"""A linear map after a registered base's mean pooling, read through the label-name head
(``app.ml.pooled_linear``: the format a UTD transfer's result is packaged in)."""

from __future__ import annotations

import numpy as np
import torch

from app.ml.bases import registered_bases
from app.ml.encoders import Encoder, embed_texts, load_encoder
from app.ml.errors import InvalidPackage
from app.ml.head import LabelNameHead
from app.ml.package_content import check_tree, resolve_inside
from app.ml.packages import LearnwarePackage
from app.ml.pooled_linear import LINEAR_WEIGHTS, apply_linear, read_linear
from app.ml.runners.base import Runner
from app.ml.runners.peft_lora import HEAD_TEMPERATURE


class PooledLinearRunner(Runner):
    """The frozen base, W after its mean pooling; logits = cos(W·meanpool(f(x)), e_c) / T."""

    format = "pooled-linear"

    def __init__(self, package: LearnwarePackage, device: torch.device | None = None, max_tokens: int = 128):
        super().__init__(package.manifest.label_names)
        base = package.manifest.base_model
        if base not in registered_bases():
            raise InvalidPackage(
                f"base_model {base!r} is not a registered base; known: {', '.join(registered_bases())}"
            )
        check_tree(package.root)
        weights = resolve_inside(package.root, package.model_path, LINEAR_WEIGHTS, "a pooled-linear package")
        self.max_tokens = max_tokens
        # The shared copy: the base itself is never modified, only its pooled output is mapped.
        self.encoder: Encoder = load_encoder(base, device=device)
        self.weight = read_linear(weights, self.encoder.hidden_size)
        # Class names are embedded by the frozen base, without the map (as UTD's prompts are).
        self.head = LabelNameHead.from_names(self.encoder, self.label_names, HEAD_TEMPERATURE)

    def features(self, texts: list[str], batch_size: int = 32) -> torch.Tensor:
        """W · meanpool(f(x)) for every text (N, hidden), float32 on the CPU."""
        pooled = embed_texts(self.encoder, texts, batch_size=batch_size, max_tokens=self.max_tokens)
        return apply_linear(self.weight, pooled)

    def _predict(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
        probs = torch.softmax(self.head.logits(self.features(texts, batch_size)), dim=-1).numpy()
        return probs.argmax(axis=1), probs
