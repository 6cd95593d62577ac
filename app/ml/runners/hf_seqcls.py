"""transformers sequence-classification directories: built-in architectures, safetensors only."""

from __future__ import annotations

import json

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

from app.ml.encoders import configure_threads, default_device, token_batches
from app.ml.errors import InvalidPackage, UnsafePackage
from app.ml.packages import REMOTE_CODE_KEYS, LearnwarePackage
from app.ml.runners.base import Runner


def check_model_type(config: dict[str, object]) -> str:
    """The model type, if transformers itself implements it with a sequence-classification head."""
    for key in REMOTE_CODE_KEYS:
        if config.get(key):
            raise UnsafePackage(f"config.json sets {key!r}: the dock never runs code shipped with a model")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        raise InvalidPackage(f"model type {model_type!r} is not built into transformers")
    if model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        raise InvalidPackage(f"transformers has no sequence-classification model for type {model_type!r}")
    if config.get("problem_type") not in (None, "single_label_classification"):
        raise InvalidPackage(f"problem_type {config['problem_type']!r} is not single-label classification")
    return model_type


class HfSeqClsRunner(Runner):
    """AutoModelForSequenceClassification with trust_remote_code=False and safetensors weights."""

    format = "hf-seqcls"

    def __init__(self, package: LearnwarePackage, device: torch.device | None = None, max_tokens: int = 128):
        super().__init__(package.manifest.label_names)
        folder = package.model_path
        try:
            raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InvalidPackage(f"cannot read model/config.json: {exc}") from exc
        if not isinstance(raw, dict):
            raise InvalidPackage("model/config.json must be a JSON object")
        check_model_type(raw)
        configure_threads()
        self.device = device or default_device()
        try:
            config = AutoConfig.from_pretrained(folder, trust_remote_code=False, local_files_only=True)
            if config.num_labels != len(self.label_names):
                raise InvalidPackage(
                    f"model has {config.num_labels} output classes, the manifest names {len(self.label_names)}"
                )
            model, info = AutoModelForSequenceClassification.from_pretrained(
                folder,
                config=config,
                trust_remote_code=False,
                use_safetensors=True,
                local_files_only=True,
                output_loading_info=True,
            )
            self.tokenizer = AutoTokenizer.from_pretrained(
                folder, trust_remote_code=False, local_files_only=True
            )
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise InvalidPackage(f"transformers cannot load the model directory: {exc}") from exc
        for kind in ("missing_keys", "mismatched_keys"):
            keys = sorted(str(k) for k in info.get(kind) or ())
            if keys:
                # Missing weights would be freshly random: predictions would mean nothing.
                raise InvalidPackage(
                    f"model weights have {len(keys)} {kind.replace('_', ' ')}, e.g. {keys[0]}"
                )
        self.model = model.to(self.device).eval()
        limit = getattr(config, "max_position_embeddings", None)
        self.max_tokens = min(max_tokens, int(limit)) if isinstance(limit, int) and limit > 8 else max_tokens

    @torch.no_grad()
    def _predict(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
        probs = np.empty((len(texts), len(self.label_names)), dtype=np.float32)
        for batch in token_batches(
            self.tokenizer, texts, batch_size=batch_size, max_tokens=self.max_tokens, device=self.device
        ):
            logits = self.model(**batch.inputs).logits.float()
            probs[batch.indices] = torch.softmax(logits, dim=-1).cpu().numpy()
        return probs.argmax(axis=1), probs
