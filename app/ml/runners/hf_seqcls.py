"""transformers sequence-classification directories: built-in architectures, safetensors only."""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from app.ml.encoders import TokenBatch, configure_threads, default_device, run_batches, token_batches
from app.ml.errors import InvalidPackage
from app.ml.package_content import check_safetensors_files, check_transformers_dir, check_tree, config_errors
from app.ml.packages import LearnwarePackage
from app.ml.runners.base import Runner
from app.ml.runners.shared_body import SharedBody, reads_first_token_only, share_body

FIRST_TOKEN_PROBE = ("a", "a longer text, of several words, to tell what the head reads")
"""Two texts of different lengths, padded to one batch, on which a loaded model is run twice: as it
is, and with its encoder's output zero but for the first token (`reads_first_token_only`)."""


class HfSeqClsRunner(Runner):
    """AutoModelForSequenceClassification with trust_remote_code=False and safetensors weights."""

    format = "hf-seqcls"

    def __init__(self, package: LearnwarePackage, device: torch.device | None = None, max_tokens: int = 128):
        super().__init__(package.manifest.label_names)
        folder = package.model_path
        # transformers opens whatever the folder's JSON names (index shards, tokenizer files,
        # an adapter's base): every such name is resolved inside the package first.
        check_tree(package.root)
        check_transformers_dir(package.root, folder)
        check_safetensors_files(folder)
        configure_threads()
        load_errors: tuple[type[Exception], ...] = (*config_errors(), RuntimeError, IndexError)
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
        except load_errors as exc:
            # A config value of the wrong type surfaces as TypeError/AttributeError deep in
            # transformers: still the package's fault, reported as such.
            raise InvalidPackage(
                f"transformers cannot load the model directory: {type(exc).__name__}: {exc}"
            ) from exc
        for kind in ("missing_keys", "mismatched_keys"):
            keys = sorted(str(k) for k in info.get(kind) or ())
            if keys:
                # Missing weights would be freshly random: predictions would mean nothing.
                raise InvalidPackage(
                    f"model weights have {len(keys)} {kind.replace('_', ' ')}, e.g. {keys[0]}"
                )
        self.model = model.to(self.device).eval()
        # Probes on one frozen encoder share it: its weights once, its outputs reused (`shared_body`),
        # text by text where the head reads only the first token and the pooled output.
        self.shared: SharedBody | None = share_body(self.model, self.device)
        if self.shared is not None and self.tokenizer.pad_token is not None:  # the check pads a batch
            probe = self.tokenizer(list(FIRST_TOKEN_PROBE), padding=True, return_tensors="pt").to(self.device)
            reads_first_token_only(self.model, self.shared, probe["input_ids"], probe["attention_mask"])
        limit = getattr(config, "max_position_embeddings", None)
        self.max_tokens = min(max_tokens, int(limit)) if isinstance(limit, int) and limit > 8 else max_tokens

    def _predict(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
        probs = np.empty((len(texts), len(self.label_names)), dtype=np.float32)
        batches = list(
            token_batches(
                self.tokenizer, texts, batch_size=batch_size, max_tokens=self.max_tokens, device=self.device
            )
        )

        def softmax(batch: TokenBatch) -> np.ndarray:
            with torch.no_grad():
                logits = self.model(**batch.inputs).logits.float()
                return torch.softmax(logits, dim=-1).cpu().numpy()

        for batch, rows in run_batches(softmax, batches, self.device):
            probs[batch.indices] = rows
        return probs.argmax(axis=1), probs
