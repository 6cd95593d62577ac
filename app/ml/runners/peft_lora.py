"""PEFT LoRA adapters over a registered base, read through the label-name head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from peft import PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors import SafetensorError
from safetensors.torch import load_file

from app.ml.adapters import read_lora_config
from app.ml.bases import registered_bases
from app.ml.encoders import Encoder, embed_texts, load_encoder
from app.ml.errors import InvalidPackage
from app.ml.head import LabelNameHead
from app.ml.package_content import check_tree, resolve_inside
from app.ml.packages import LearnwarePackage
from app.ml.runners.base import Runner
from app.ml.safetensors_header import read_safetensors_header

HEAD_TEMPERATURE = 0.05


def load_adapter(model: PeftModel, weights: Path) -> None:
    """Load adapter weights after checking every key and shape against the injected adapter."""
    read_safetensors_header(weights)  # declared shapes against their bytes, before any allocation
    try:
        state = load_file(str(weights))
    except (OSError, SafetensorError) as exc:
        raise InvalidPackage(f"cannot read {weights.name}: {exc}") from exc
    expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(model).items()}
    missing = sorted(set(expected) - set(state))
    if missing:
        raise InvalidPackage(f"adapter lacks {len(missing)} tensors the base needs, e.g. {missing[0]!r}")
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise InvalidPackage(
            f"adapter has {len(unexpected)} tensors the base has no place for, e.g. {unexpected[0]!r}"
        )
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise InvalidPackage(
                f"adapter tensor {key!r} has shape {tuple(state[key].shape)}, the base needs {shape}"
            )
        if not torch.isfinite(state[key]).all():
            raise InvalidPackage(f"adapter tensor {key!r} has NaN or infinite values")
    set_peft_model_state_dict(model, {k: v.float() for k, v in state.items()})


class PeftLoraRunner(Runner):
    """The base with the adapter applied; logits = cos(meanpool(f(x)), e_c) / T."""

    format = "peft-lora"

    def __init__(self, package: LearnwarePackage, device: torch.device | None = None, max_tokens: int = 128):
        super().__init__(package.manifest.label_names)
        base = package.manifest.base_model
        if base not in registered_bases():
            raise InvalidPackage(
                f"base_model {base!r} is not a registered base; known: {', '.join(registered_bases())}"
            )
        # The adapter's own base_model_name_or_path is never followed: the base is the manifest's
        # registered alias, and the two files below must be files the package brought.
        check_tree(package.root)
        config_path = resolve_inside(
            package.root, package.model_path, "adapter_config.json", "a peft-lora package"
        )
        weights_path = resolve_inside(
            package.root, package.model_path, "adapter_model.safetensors", "a peft-lora package"
        )
        config = read_lora_config(config_path)
        self.max_tokens = max_tokens
        self.encoder: Encoder = load_encoder(base, fresh=True, device=device)
        # Class names are embedded by the frozen base, before the adapter is injected.
        self.head = LabelNameHead.from_names(self.encoder, self.label_names, HEAD_TEMPERATURE)
        try:
            model = get_peft_model(self.encoder.model, config)
        except ValueError as exc:
            raise InvalidPackage(f"adapter does not fit base {base!r}: {exc}") from exc
        load_adapter(model, weights_path)
        self.model: PeftModel = model.eval()

    def features(self, texts: list[str], batch_size: int = 32) -> torch.Tensor:
        """Mean-pooled features of the adapted base (N, hidden), float32 on the CPU."""
        return embed_texts(
            self.encoder, texts, batch_size=batch_size, max_tokens=self.max_tokens, model=self.model
        )

    def _predict(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
        probs = torch.softmax(self.head.logits(self.features(texts, batch_size)), dim=-1).numpy()
        return probs.argmax(axis=1), probs
