"""LoRA classifiers on a base with the label-name head: train, fine-tune, predict, save.

This is the dock's one LoRA training loop: learnware builders use it from scratch,
PAVE♦ (fine-tune the identified learnware on the user's shots) starts from an adapter.
The head has no parameters, so an adapter serves any label set by its names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from app.ml.encoders import Encoder, check_texts, load_encoder, lora_targets, mean_pool, token_batches
from app.ml.errors import InvalidInput
from app.ml.head import LabelNameHead
from app.ml.progress import Progress


class LoraClassifier:
    """A base with a LoRA adapter and the label-name head."""

    def __init__(self, encoder: Encoder, model: PeftModel, temperature: float = 0.05, max_tokens: int = 128):
        self.encoder = encoder
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._heads: dict[tuple[str, ...], LabelNameHead] = {}

    @classmethod
    def new(cls, base: str | Path, *, rank: int = 8, alpha: float = 16.0, seed: int = 0) -> LoraClassifier:
        """A fresh adapter (peft's default init: random A, B = 0) on a private copy of the base."""
        encoder = load_encoder(base, fresh=True)
        torch.manual_seed(seed)
        config = LoraConfig(
            r=rank,
            lora_alpha=alpha,  # type: ignore[arg-type]  # peft accepts floats
            target_modules=list(lora_targets(encoder.model_type)),
            lora_dropout=0.0,
            bias="none",
        )
        return cls(encoder, get_peft_model(encoder.model, config))

    @classmethod
    def load(cls, base: str | Path, adapter_dir: Path, *, trainable: bool = False) -> LoraClassifier:
        """Load a saved adapter (adapter_config.json + adapter_model.safetensors) over ``base``."""
        if not (Path(adapter_dir) / "adapter_model.safetensors").is_file():
            raise InvalidInput(f"no adapter_model.safetensors in {adapter_dir}")
        encoder = load_encoder(base, fresh=True)
        model = PeftModel.from_pretrained(
            encoder.model, str(adapter_dir), is_trainable=trainable, local_files_only=True
        )
        return cls(encoder, model)

    def head(self, label_names: Sequence[str]) -> LabelNameHead:
        key = tuple(label_names)
        if key not in self._heads:
            with self.model.disable_adapter():
                self._heads[key] = LabelNameHead.from_names(self.encoder, key, self.temperature)
        return self._heads[key]

    def _logits(self, inputs: dict[str, torch.Tensor], head: LabelNameHead) -> torch.Tensor:
        device = self.encoder.device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            hidden = self.model(**inputs).last_hidden_state
        return head.logits(mean_pool(hidden.float(), inputs["attention_mask"]))

    @torch.no_grad()
    def predict_proba(
        self, texts: Sequence[str], label_names: Sequence[str], batch_size: int = 64
    ) -> np.ndarray:
        """Class probabilities (rows in input order) for ``label_names``."""
        head = self.head(label_names)
        texts = check_texts(texts)
        self.model.eval()
        out = np.zeros((len(texts), len(head)), dtype=np.float32)
        for batch in token_batches(
            self.encoder.tokenizer,
            texts,
            batch_size=batch_size,
            max_tokens=self.max_tokens,
            device=self.encoder.device,
        ):
            out[batch.indices] = torch.softmax(self._logits(batch.inputs, head), dim=-1).float().cpu().numpy()
        return out

    def fit(
        self,
        texts: Sequence[str],
        labels: Sequence[int] | np.ndarray,
        label_names: Sequence[str],
        *,
        steps: int,
        lr: float = 1e-3,
        batch_size: int = 16,
        seed: int = 0,
        progress: Progress | None = None,
    ) -> list[float]:
        """Train the adapter's LoRA weights with cross-entropy through the label-name head."""
        texts = check_texts(texts)
        y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
        head = self.head(label_names)
        if y.numel() != len(texts) or y.min() < 0 or y.max() >= len(head):
            raise InvalidInput("labels must be one id in [0, number of label names) per text")
        params = [p for n, p in self.model.named_parameters() if "lora_" in n]
        for p in params:
            p.requires_grad_(True)
        optimizer = torch.optim.AdamW(params, lr=lr)
        gen = torch.Generator().manual_seed(seed)
        self.model.train()
        losses: list[float] = []
        order, cursor = torch.randperm(len(texts), generator=gen), 0
        for step in range(steps):
            if cursor >= len(order):
                order, cursor = torch.randperm(len(texts), generator=gen), 0
            idx = order[cursor : cursor + batch_size]
            cursor += batch_size
            enc = self.encoder.tokenizer(
                [texts[i] for i in idx.tolist()],
                padding="longest",
                truncation=True,
                max_length=self.max_tokens,
                return_tensors="pt",
            ).to(self.encoder.device)
            loss = torch.nn.functional.cross_entropy(
                self._logits(dict(enc), head), y[idx].to(self.encoder.device)
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.item()))
            if progress:
                progress(step + 1, steps, f"loss {loss.item():.3f}")
        self.model.eval()
        return losses

    def save(self, adapter_dir: Path) -> Path:
        """Write the adapter as safetensors (adapter_config.json + adapter_model.safetensors)."""
        adapter_dir = Path(adapter_dir)
        self.model.save_pretrained(str(adapter_dir), safe_serialization=True)
        return adapter_dir


def accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(probs, axis=1) == np.asarray(labels)))
